"""`hicache bench memory`: host-buffer registration time vs size on 4 KB vs 2 MB pages, and emu
H2D/D2H bandwidth with the host buffer on THP vs 4 KB pages, in one run."""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from conformance.bench.common import emit, machine
from conformance.common import args as arg_types
from conformance.common.errors import CliError
from conformance.common.spec_options import add_spec_options
from hal.common.units import HELP as UNITS_HELP
from hal.common.units import parse_size
from hal.memory import vm
from hal.memory.budget import fmt, refuse_over
from hal.memory.host import allocate_host
from hal.transfer import kvcacheio, segcopy

HELP = "host buffers: registration time vs size (4 KB vs THP pages) and emu H2D/D2H bandwidth, THP on vs off"


def parse_sizes(text: str) -> list[int]:
    """--sizes: comma-separated sizes (hal.common.units), each positive; ValueError naming --sizes."""
    sizes = [parse_size(s, name="--sizes", minimum=1) for s in text.split(",") if s.strip()]
    if not sizes:
        raise ValueError("--sizes: no size given")
    return sizes


def add_arguments(p) -> None:
    # The defaults were written 64M,256M,1G when this command read K/M/G as powers of 1024.
    p.add_argument("--sizes", default="64MiB,256MiB,1GiB",
                   help=f"comma-separated buffer sizes whose registration is timed ({UNITS_HELP})")
    p.add_argument("--copy-size", default="256MiB", help=f"bytes moved per H2D/D2H transfer ({UNITS_HELP})")
    p.add_argument("--item-bytes", type=arg_types.positive, default=1152, help="bytes per token (576-dim MLA row in bf16)")
    add_spec_options(p, "bench memory", filled=True)  # geometry, page size, profile as every command spells them
    p.add_argument("--repeat", type=arg_types.positive, default=5, help="timed repetitions; medians are reported")
    p.add_argument("--backend", default="emu", help="whose register_host and copies are timed: emu (this CPU, "
                   "mlock), cuda or xpu (the device's host registration and DMA)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def memlock_room() -> int | None:
    """Bytes mlock may pin here: None when unlimited (or CAP_IPC_LOCK is held)."""
    from conformance.doctor.pinned_memory import cap_ipc_lock, memlock_limit

    return None if cap_ipc_lock() else memlock_limit()


def check(a) -> None:
    """Refused before it runs, naming the option: buffers larger than this machine can give, and
    pinning that RLIMIT_MEMLOCK would refuse (mlock fails without CAP_IPC_LOCK above the limit)."""
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


def _page_table_entries(mapped: int, huge_bytes: int) -> int:
    return huge_bytes // vm.HUGE_PAGE + (mapped - huge_bytes) // vm.PAGE


def _alternating_medians(steps: dict, repeat: int) -> dict:
    """Median seconds of each step, run round-robin (one warm-up round first) so that load from
    other processes drifting during the run hits every variant alike."""
    times: dict = {k: [] for k in steps}
    for i in range(repeat + 1):
        for k, fn in steps.items():
            t0 = time.perf_counter()
            fn()
            if i:
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def registration(sizes: list[int], repeat: int, backend) -> list[dict]:
    """Median seconds to register and to unregister an already populated buffer, per page size
    (4 KB and THP buffers alternate, one warm-up round first)."""
    rows = []
    for size in sizes:
        bufs = {huge: allocate_host(size, huge_pages=huge) for huge in (False, True)}
        try:
            reg: dict = {huge: [] for huge in bufs}
            unreg: dict = {huge: [] for huge in bufs}
            for i in range(repeat + 1):
                for huge, buf in bufs.items():
                    t0 = time.perf_counter()
                    handle = backend.register_host(buf.address, buf.mapped_bytes)
                    t1 = time.perf_counter()
                    backend.unregister_host(handle)
                    if i:
                        reg[huge].append(t1 - t0)
                        unreg[huge].append(time.perf_counter() - t1)
            for huge, buf in bufs.items():
                rep = buf.report()
                seconds = statistics.median(reg[huge])
                rows.append({
                    "bytes": size, "huge_pages": huge, "huge_page_coverage": rep["huge_page_coverage"],
                    "page_table_entries": _page_table_entries(rep["mapped_bytes"], rep["huge_page_bytes"]),
                    "register_seconds": seconds, "register_gbps": size / seconds / 1e9,
                    "unregister_seconds": statistics.median(unreg[huge]), "warnings": rep["warnings"],
                })  # fmt: skip
        finally:
            for buf in bufs.values():
                buf.close()
    return rows


def _scattered_slots(slots: int, page: int, rng: np.random.Generator) -> torch.Tensor:
    pages = slots // page
    order = rng.permutation(pages)
    return torch.from_numpy((order[:, None] * page + np.arange(page)).reshape(-1).astype(np.int64))


def bandwidth(copy_size: int, item: int, page: int, repeat: int, backend) -> dict:
    """H2D and D2H of `copy_size` bytes in scattered pages through hal.transfer.kvcacheio, and one contiguous
    torch copy for reference, with the host buffer on THP and on 4 KB pages (both registered)."""
    slots = copy_size // item // page * page
    if slots == 0:
        raise ValueError(f"--copy-size: {copy_size} bytes hold no page of {page} x {item} bytes")
    nbytes = slots * item
    rng = np.random.default_rng(0)
    host_idx, dev_idx = _scattered_slots(slots, page, rng), _scattered_slots(slots, page, rng)
    dev = backend.alloc_device((slots, item), torch.uint8).fill_(1)
    flat = dev.view(-1)
    bufs = {
        "4k": allocate_host(nbytes, huge_pages=False, backend=backend),
        "thp": allocate_host(nbytes, huge_pages=True, backend=backend),
    }
    try:
        steps = {}
        for k, buf in bufs.items():
            host = buf.tensor.view(slots, item)
            steps[(k, "h2d")] = lambda h=host: kvcacheio.transfer_kv_per_layer_mla(
                h, dev, host_idx, dev_idx, item
            ).wait()
            steps[(k, "d2h")] = lambda h=host: kvcacheio.transfer_kv_per_layer_mla(
                dev, h, dev_idx, host_idx, item
            ).wait()
            steps[(k, "contiguous_h2d")] = lambda t=buf.tensor: flat.copy_(t)
            steps[(k, "contiguous_d2h")] = lambda t=buf.tensor: t.copy_(flat)
        with kvcacheio.use(backend):
            secs = _alternating_medians(steps, repeat)
        out = {}
        for k, buf in bufs.items():
            rep = buf.report()
            row = {"huge_page_coverage": rep["huge_page_coverage"], "bytes": nbytes, "warnings": rep["warnings"]}
            for d in ("h2d", "d2h", "contiguous_h2d", "contiguous_d2h"):
                row[f"{d}_seconds"] = secs[(k, d)]
                row[f"{d}_gbps"] = nbytes / secs[(k, d)] / 1e9
            out[k] = row
        return out
    finally:
        steps = None
        for buf in bufs.values():
            buf.close()


def _not_compared(thp: dict) -> str:
    """What a ratio line adds when its THP buffer did not come out on 2 MB pages: it then compares
    4 KB pages with 4 KB pages, and the buffer's warnings say why."""
    if thp["huge_page_coverage"] >= vm.WELL_COVERED:
        return ""
    why = "; ".join(thp["warnings"]) or "the kernel gave 4 KB pages"
    return f" (NOT a page-size comparison: the THP buffer is {thp['huge_page_coverage']:.0%} on 2 MB pages: {why})"


def run(a) -> int:
    sizes = parse_sizes(a.sizes)
    copy_size = parse_size(a.copy_size, name="--copy-size", minimum=1)
    for name in ("item_bytes", "page_size", "repeat"):
        if getattr(a, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')}: must be positive, got {getattr(a, name)}")
    from conformance.bench.transfer import open_backend

    a.copy_mode = None
    backend = open_backend(a)  # refused naming --backend when absent here
    if not backend.capabilities().moves_bytes:
        raise ValueError(f"--backend: {a.backend} moves no bytes; registration and copies need a backend that does")
    reg = registration(sizes, a.repeat, backend)
    bw = bandwidth(copy_size, a.item_bytes, a.page_size, a.repeat, backend)
    by_size = {r["bytes"]: {} for r in reg}
    for r in reg:
        by_size[r["bytes"]]["thp" if r["huge_pages"] else "4k"] = r
    result = {
        "machine": machine(),
        "backend": backend.name,
        "registration_via": f"{backend.name} backend register_host"
                            + (" (mlock of the range)" if backend.name == "emu" else ""),
        "copies_via": f"hal.transfer.kvcacheio.transfer_kv_per_layer_mla on {backend.name}"
        + (f" (engine {segcopy.engine()})" if backend.device_type == "cpu" else "") + ", "
        f"pages of {a.page_size} x {a.item_bytes} B scattered; plus one contiguous torch copy_",
        "repeat": a.repeat,
        "registration": reg,
        "registration_ratio_4k_over_thp": {str(s): v["4k"]["register_seconds"] / v["thp"]["register_seconds"]
                                           for s, v in by_size.items()},
        "bandwidth": bw,
        "bandwidth_ratio_thp_over_4k": {d: bw["thp"][f"{d}_gbps"] / bw["4k"][f"{d}_gbps"]
                                        for d in ("h2d", "d2h", "contiguous_h2d", "contiguous_d2h")},
    }  # fmt: skip
    lines = [
        f"registration via {result['registration_via']}; median of {a.repeat}",
        f"{'size':>8} {'pages':>5} {'THP cov':>8} {'PTEs':>9} {'register ms':>12} {'GB/s':>7} {'unreg ms':>9}",
    ]
    for r in reg:
        lines.append(
            f"{r['bytes'] / 2**20:>7.0f}MiB {'2M' if r['huge_pages'] else '4K':>5} {r['huge_page_coverage']:>8.2f} "
            f"{r['page_table_entries']:>9,} {r['register_seconds'] * 1e3:>12.2f} {r['register_gbps']:>7.1f} "
            f"{r['unregister_seconds'] * 1e3:>9.2f}"
        )
    for s, ratio in result["registration_ratio_4k_over_thp"].items():
        lines.append(f"register {int(s) / 2**20:.0f} MiB: 4 KB pages take {ratio:.1f}x the time of THP"
                     + _not_compared(by_size[int(s)]["thp"]))
    lines.append(f"copies via {result['copies_via']}")
    lines.append(
        f"{'host pages':<11}{'THP cov':>8}{'H2D GB/s':>10}{'D2H GB/s':>10}{'flat H2D':>10}{'flat D2H':>10}"
    )
    for k, b in bw.items():
        lines.append(
            f"{k:<11}{b['huge_page_coverage']:>8.2f}{b['h2d_gbps']:>10.2f}{b['d2h_gbps']:>10.2f}"
            f"{b['contiguous_h2d_gbps']:>10.2f}{b['contiguous_d2h_gbps']:>10.2f}"
        )
    ratios = result["bandwidth_ratio_thp_over_4k"]
    lines.append("THP / 4 KB bandwidth: " + ", ".join(f"{d} {v:.2f}x" for d, v in ratios.items())
                 + _not_compared(bw["thp"]))
    emit(result, a.json, lines)
    return 0
