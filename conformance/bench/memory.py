"""`hicache bench memory`: host-buffer registration time vs size on 4 KB vs 2 MB pages, and emu
H2D/D2H bandwidth with the host buffer on THP vs 4 KB pages, in one run."""

from __future__ import annotations

import re
import statistics
import time

import numpy as np
import torch

from conformance.bench.common import emit, machine, median_seconds
from hal import kvcacheio, segcopy, vm
from hal.backend import get_backend
from hal.memory import allocate_host

HELP = "host buffers: registration time vs size (4 KB vs THP pages) and emu H2D/D2H bandwidth, THP on vs off"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str, arg: str) -> int:
    """'64M' -> 67108864 (binary units K, M, G); ValueError naming `arg`."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"{arg}: expected a positive size like 64M or 1G, got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def add_arguments(p) -> None:
    p.add_argument("--sizes", default="64M,256M,1G", help="buffer sizes whose registration is timed")
    p.add_argument("--copy-size", default="256M", help="bytes moved per H2D/D2H transfer")
    p.add_argument("--item-bytes", type=int, default=1152, help="bytes per token (576-dim MLA row in bf16)")
    p.add_argument("--page-size", type=int, default=64, help="tokens per page; pages are scattered")
    p.add_argument("--repeat", type=int, default=5, help="timed repetitions; medians are reported")
    p.add_argument("--json", action="store_true")


def _page_table_entries(mapped: int, huge_bytes: int) -> int:
    return huge_bytes // vm.HUGE_PAGE + (mapped - huge_bytes) // vm.PAGE


def registration(sizes: list[int], repeat: int, backend) -> list[dict]:
    """Median seconds to register (and unregister) an already populated buffer, per page size."""
    rows = []
    for size in sizes:
        for huge in (False, True):
            with allocate_host(size, huge_pages=huge) as buf:
                rep = buf.report()
                reg, unreg = [], []
                for i in range(repeat + 1):  # the first round is a warm-up
                    t0 = time.perf_counter()
                    handle = backend.register_host(buf.address, buf.mapped_bytes)
                    t1 = time.perf_counter()
                    backend.unregister_host(handle)
                    t2 = time.perf_counter()
                    if i:
                        reg.append(t1 - t0)
                        unreg.append(t2 - t1)
            rows.append({
                "bytes": size, "huge_pages": huge, "huge_page_coverage": rep["huge_page_coverage"],
                "page_table_entries": _page_table_entries(rep["mapped_bytes"], rep["huge_page_bytes"]),
                "register_seconds": statistics.median(reg), "unregister_seconds": statistics.median(unreg),
                "register_gbps": size / statistics.median(reg) / 1e9, "warnings": rep["warnings"],
            })  # fmt: skip
    return rows


def _scattered_slots(slots: int, page: int, rng: np.random.Generator) -> torch.Tensor:
    pages = slots // page
    order = rng.permutation(pages)
    return torch.from_numpy((order[:, None] * page + np.arange(page)).reshape(-1).astype(np.int64))


def bandwidth(copy_size: int, item: int, page: int, repeat: int, backend) -> dict:
    """H2D and D2H of `copy_size` bytes in scattered pages through hal.kvcacheio, and one contiguous
    torch copy for reference, with the host buffer on THP and on 4 KB pages."""
    slots = copy_size // item // page * page
    if slots == 0:
        raise ValueError(f"--copy-size: {copy_size} bytes hold no page of {page} x {item} bytes")
    out = {}
    for huge in (False, True):
        rng = np.random.default_rng(0)  # the same indices for both page sizes
        host_idx, dev_idx = _scattered_slots(slots, page, rng), _scattered_slots(slots, page, rng)
        with allocate_host(slots * item, huge_pages=huge, backend=backend) as buf:
            host = buf.tensor.view(slots, item)
            dev = backend.alloc_device((slots, item), torch.uint8).fill_(1)
            with kvcacheio.use(backend):
                h2d = median_seconds(
                    lambda: kvcacheio.transfer_kv_per_layer_mla(host, dev, host_idx, dev_idx, item).wait(), repeat)
                d2h = median_seconds(
                    lambda: kvcacheio.transfer_kv_per_layer_mla(dev, host, dev_idx, host_idx, item).wait(), repeat)
            h2d_flat = median_seconds(lambda: dev.view(-1).copy_(buf.tensor), repeat)
            d2h_flat = median_seconds(lambda: buf.tensor.copy_(dev.view(-1)), repeat)
            coverage = buf.report()["huge_page_coverage"]
            del host, dev
        nbytes = slots * item
        out["thp" if huge else "4k"] = {
            "huge_page_coverage": coverage, "bytes": nbytes,
            "h2d_seconds": h2d, "d2h_seconds": d2h, "h2d_gbps": nbytes / h2d / 1e9, "d2h_gbps": nbytes / d2h / 1e9,
            "contiguous_h2d_gbps": nbytes / h2d_flat / 1e9, "contiguous_d2h_gbps": nbytes / d2h_flat / 1e9,
        }  # fmt: skip
    return out


def run(a) -> int:
    sizes = [parse_size(s, "--sizes") for s in a.sizes.split(",") if s.strip()]
    if not sizes:
        raise ValueError("--sizes: no size given")
    copy_size = parse_size(a.copy_size, "--copy-size")
    for name in ("item_bytes", "page_size", "repeat"):
        if getattr(a, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')}: must be positive, got {getattr(a, name)}")
    emu = get_backend("emu", "emu")
    reg = registration(sizes, a.repeat, emu)
    bw = bandwidth(copy_size, a.item_bytes, a.page_size, a.repeat, emu)
    by_size = {r["bytes"]: {} for r in reg}
    for r in reg:
        by_size[r["bytes"]]["thp" if r["huge_pages"] else "4k"] = r
    result = {
        "machine": machine(),
        "registration_via": "emu backend register_host (mlock of the range)",
        "copies_via": f"hal.kvcacheio.transfer_kv_per_layer_mla on emu (engine {segcopy.engine()}), "
        f"pages of {a.page_size} x {a.item_bytes} B scattered; plus one contiguous torch copy_",
        "repeat": a.repeat,
        "registration": reg,
        "registration_ratio_4k_over_thp": {str(s): v["4k"]["register_seconds"] / v["thp"]["register_seconds"]
                                           for s, v in by_size.items()},
        "bandwidth": bw,
        "bandwidth_ratio_thp_over_4k": {d: bw["thp"][f"{d}_gbps"] / bw["4k"][f"{d}_gbps"]
                                        for d in ("h2d", "d2h", "contiguous_h2d", "contiguous_d2h")},
    }  # fmt: skip
    lines = [f"registration via {result['registration_via']}; median of {a.repeat}",
             f"{'size':>8} {'pages':>5} {'THP cov':>8} {'PTEs':>9} {'register ms':>12} {'GB/s':>7} {'unreg ms':>9}"]
    for r in reg:
        lines.append(f"{r['bytes'] >> 20:>7}M {'2M' if r['huge_pages'] else '4K':>5} {r['huge_page_coverage']:>8.2f} "
                     f"{r['page_table_entries']:>9,} {r['register_seconds'] * 1e3:>12.2f} {r['register_gbps']:>7.1f} "
                     f"{r['unregister_seconds'] * 1e3:>9.2f}")
    for s, ratio in result["registration_ratio_4k_over_thp"].items():
        lines.append(f"register {int(s) >> 20}M: 4 KB pages take {ratio:.1f}x the time of THP")
    lines.append(f"copies via {result['copies_via']}")
    lines.append(f"{'host pages':<11}{'THP cov':>8}{'H2D GB/s':>10}{'D2H GB/s':>10}{'flat H2D':>10}{'flat D2H':>10}")
    for k, b in bw.items():
        lines.append(f"{k:<11}{b['huge_page_coverage']:>8.2f}{b['h2d_gbps']:>10.2f}{b['d2h_gbps']:>10.2f}"
                     f"{b['contiguous_h2d_gbps']:>10.2f}{b['contiguous_d2h_gbps']:>10.2f}")
    ratios = result["bandwidth_ratio_thp_over_4k"]
    lines.append("THP / 4 KB bandwidth: " + ", ".join(f"{d} {v:.2f}x" for d, v in ratios.items()))
    emit(result, a.json, lines)
    return 0
