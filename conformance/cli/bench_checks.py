"""What each benchmark is refused for before it starts: its options, its files, its memory.

The benchmarks (conformance/bench/) assume sane arguments; these checks run first, from
`hicache bench`, and raise CliError naming the option: layouts and profiles that do not exist,
traces that are empty or not text, buffers larger than this machine can give, and pinning that
RLIMIT_MEMLOCK would refuse (mlock fails without CAP_IPC_LOCK above the limit).
"""

from __future__ import annotations

from conformance.cli.budget import fmt, refuse_over
from conformance.cli.errors import CliError, clip, clip_path
from conformance.cli.inputs import load_profile_arg, text_file

MLA_BF16_BYTES = 2


def _profiles(a, *options: str) -> None:
    for option in options:
        load_profile_arg(option, getattr(a, option.removeprefix("--")))


def check_transfer(a) -> None:
    from hal.transfer.layouts import MLA_LAYOUTS

    layouts = [x for x in a.layouts.split(",") if x]
    bad = [x for x in layouts if x not in MLA_LAYOUTS]
    if bad or not layouts:
        raise CliError("--layouts", f"{clip(', '.join(bad) or repr(a.layouts))}: expected a comma-separated "
                                    f"list of {', '.join(MLA_LAYOUTS)}")
    _profiles(a, "--profile", "--targets")
    if a.tokens % a.page_size:  # the kvcacheio ops move whole pages
        raise CliError("--tokens", f"{a.tokens:,} is not a whole number of pages of --page-size {a.page_size}")
    pool = 2 * -(-a.tokens // a.page_size) * a.page_size  # slots: scattered pages in twice the room
    row = a.kv_dim * MLA_BF16_BYTES
    # device pool, one host pool at a time, and the contiguous copy's source and destination
    needed = 2 * pool * a.layers * row + 2 * a.tokens * a.layers * row + pool * 48
    refuse_over("--tokens", needed, f"device and host pools of {pool:,} slots x {a.layers} layers x {row} B, "
                                    "plus the contiguous copy")


def memlock_room() -> int | None:
    """Bytes mlock may pin here: None when unlimited (or CAP_IPC_LOCK is held)."""
    from conformance.doctor.checks import cap_ipc_lock, memlock_limit

    return None if cap_ipc_lock() else memlock_limit()


def check_memory(a) -> None:
    from conformance.bench.memory import parse_sizes
    from hal.units import parse_size

    sizes = parse_sizes(a.sizes)
    copy_size = parse_size(a.copy_size, name="--copy-size", minimum=1)
    refuse_over("--sizes", 2 * max(sizes), f"a 4 KB-page and a THP buffer of {fmt(max(sizes))}, side by side")
    refuse_over("--copy-size", 3 * copy_size, f"two host buffers and a device buffer of {fmt(copy_size)}")
    room = memlock_room()
    if room is not None and max(sizes) > room:
        raise CliError("--sizes", f"registering {fmt(max(sizes))} pins it with mlock, but RLIMIT_MEMLOCK is "
                                  f"{fmt(room)} and this process lacks CAP_IPC_LOCK; raise `ulimit -l` "
                                  "(or run with CAP_IPC_LOCK), or give smaller --sizes")
    if room is not None and copy_size > room:
        raise CliError("--copy-size", f"the {fmt(copy_size)} host buffers are pinned with mlock, but "
                                      f"RLIMIT_MEMLOCK is {fmt(room)} without CAP_IPC_LOCK; raise `ulimit -l`, "
                                      "or give a smaller --copy-size")


def check_replay(a) -> None:
    from hicache_ref.sim.trace import find_trace, read_trace

    trace = a.trace or find_trace("conversation_trace.jsonl")
    if trace is None:
        raise CliError("--trace", "not given and no conversation_trace.jsonl found (neither in $HICACHE_TRACES nor packaged)")
    trace = text_file("--trace", trace, "a Mooncake JSONL trace")
    try:
        empty = not read_trace(trace, 1)
    except UnicodeDecodeError as e:
        raise CliError("--trace", f"{clip_path(trace)}: not UTF-8 text (byte {e.start} of a line)") from None
    if empty:
        raise CliError("--trace", f"{clip_path(trace)}: holds no request; nothing to time")


def check_spmd(a) -> None:
    from hal.memory import shm

    try:
        shm.validate_dir(a.shared_dir, 1)
    except ValueError as e:
        raise CliError("--shared-dir", str(e).removeprefix("shared_dir: ")) from None


def check_l3(a) -> None:
    from conformance.bench.l3 import check

    check(a)


def check_l3_hits(a) -> None:
    """--trace must be a readable text file (the rest is typed by argparse)."""
    if a.trace is not None:
        from conformance.cli.inputs import text_file

        text_file("--trace", a.trace, "a Mooncake JSONL trace")


CHECKS = {"transfer": check_transfer, "memory": check_memory, "replay": check_replay, "sweep": check_replay,
          "spmd": check_spmd, "l3": check_l3, "l3_hits": check_l3_hits}
