"""The SGLang 0.5.23 launch flags of a configuration, and the host settings that go with it.

Flags are the server's own options (`python -m sglang.launch_server --help`), values as its parser
takes them. What SGLang has no flag for (huge pages before registration, NUMA placement, PCIe
ordering, one host copy per TP group) is a host setting, said with the reason.
"""

from __future__ import annotations

L3_BACKEND = "mooncake"  # the seed's L3: decode nodes' host DRAM pooled through Mooncake


def launch_flags(c, page_size: int, tp: int, mem_fraction_static: float | None, prefetch_policy: str) -> list[str]:
    """The flags that turn HiCache on as `c` (a hicache_ref.advise.space.Candidate) says."""
    flags = ["--page-size", str(page_size), "--tp-size", str(tp)]
    if mem_fraction_static is not None:
        flags += ["--mem-fraction-static", f"{mem_fraction_static:g}"]
    flags += ["--enable-hierarchical-cache", "--hicache-ratio", f"{c.ratio:g}", "--hicache-mem-layout", c.layout,
              "--hicache-io-backend", c.io_backend, "--hicache-write-policy", c.write_policy]
    if c.l3:
        flags += ["--hicache-storage-backend", L3_BACKEND, "--hicache-storage-prefetch-policy", prefetch_policy]
    return flags


def host_settings(c, profile, tp: int, token_bytes: int) -> list[str]:
    """What to set on the host for `c`, one line each."""
    pool = c.l2_per_rank * token_bytes * (tp if c.tp_shared else 1)
    lines = [f"transparent huge pages on the host pool ({pool / 1e9:,.1f} GB{' shared' if c.tp_shared else ' per rank'}): "
             "madvise(MADV_HUGEPAGE) before it is registered (registration pins 4 KB pages THP can no longer merge)"]
    if c.tp_shared:
        lines.append(f"one host copy for the TP group of {tp}: a MAP_SHARED pool (/dev/shm with THP), rank 0 writes it, "
                     "every rank reads it (MLA's latent KV is identical on each rank; not an SGLang 0.5.23 flag)")
        lines.append("NUMA: interleave the shared pool over all nodes while it is registered")
    else:
        lines.append("NUMA: bind each card's host pool to the card's own node, and turn the framework's "
                     "auto-detection off")
    per_switch = (profile.topology.devices_per_switch if profile.topology else None) or 1
    if per_switch > 1:
        lines.append(f"IDO: ID-based ordering on the PCIe root complex ({per_switch} cards share an uplink, so "
                     "their D2H writes stop waiting on each other)")
    return lines


def command_line(flags: list[str]) -> str:
    """The flags as one shell line after the server's name."""
    return "python -m sglang.launch_server --model-path MODEL " + " ".join(flags)
