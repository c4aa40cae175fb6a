"""`hicache bench transfer`: plan time, and scattered all-layer copies vs one contiguous copy, per layout."""

from __future__ import annotations

import numpy as np
import torch

from conformance.bench.common import check_targets, emit, machine, median_seconds
from conformance.cli.plan import slot_indices
from hal.backend import get_backend
from hal.transfer import kvcacheio, segcopy
from hal.transfer import pool_ops as pool_transfer
from hal.transfer.layouts import KVGeometry, host_shape
from hal.transfer.plan import plan_pool_transfer
from hal.transfer.seed import seed_plan

HELP = "plan time for the seed config and emu transfer bandwidth per host layout vs a contiguous copy"


def add_arguments(p) -> None:
    p.add_argument("--tokens", type=int, default=8192, help="tokens moved per transfer (scattered pages)")
    p.add_argument("--layers", type=int, default=78)
    p.add_argument("--kv-dim", type=int, default=576)
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--layouts", default="layer_first,page_first_direct,page_first")
    p.add_argument("--profile", default="p800", help="profile whose link model prices the same plans")
    p.add_argument("--targets", default="emu",
                   help="profile whose targets the measured figures are checked against (this machine's class)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", action="store_true")


def plan_times(repeat: int) -> dict:
    """Segments and median planning time of the seed transfer (hal.transfer.seed)."""
    out = {}
    for layout in ("layer_first", "page_first_direct"):
        secs = median_seconds(lambda lay=layout: seed_plan(lay), repeat)
        out[layout] = {"segments": seed_plan(layout).num_segments, "plan_seconds": secs}
    return out


def _memcpy_seconds(nbytes: int, repeat: int) -> float:
    """The peer: one contiguous torch copy of the same bytes, buffers freed afterwards."""
    src, dst = torch.ones(nbytes, dtype=torch.uint8), torch.zeros(nbytes, dtype=torch.uint8)
    return median_seconds(lambda: dst.copy_(src), repeat)


def _steps(layout, geom, host, dev, host_idx, dev_idx, layers) -> dict:
    """The timed transfers of one layout: all-layer backup, per-layer loads, and for
    layer_first upstream's all-layer op run host -> device."""
    steps = {
        "d2h": lambda: pool_transfer.backup(layout, geom, host, dev, host_idx, dev_idx).wait(),
        "h2d": lambda: pool_transfer.load_all_layers(layout, geom, host, dev, host_idx, dev_idx)[-1].wait(),
    }
    if layout == "layer_first":
        hi, di = torch.from_numpy(host_idx), torch.from_numpy(dev_idx)
        host_layers = [host[0][i] for i in range(layers)]
        steps["h2d_all_layer"] = lambda: kvcacheio.transfer_kv_all_layer_mla(
            host_layers, dev[0], hi, di, geom.item_size, layers).wait()
    return steps


def run(a) -> int:
    emu = get_backend("emu", "emu")
    priced = get_backend("count", a.profile)  # prices the plans on the modeled clock, moves nothing
    geom = KVGeometry("mla", a.layers, 1, a.kv_dim, torch.bfloat16, a.page_size)
    pool = 2 * (-(-a.tokens // a.page_size)) * a.page_size
    rng = np.random.default_rng(0)
    dev_idx = slot_indices(a.tokens, a.page_size, True, rng)
    host_idx = slot_indices(a.tokens, a.page_size, True, rng)
    dev = [[emu.alloc_device((pool, 1, a.kv_dim), torch.bfloat16).fill_(1) for _ in range(a.layers)]]
    nbytes = a.tokens * geom.layout_dim
    memcpy = _memcpy_seconds(nbytes, a.repeat)
    result = {"machine": machine(), "engine": segcopy.engine(), "profile": a.profile,
              "config": {"tokens": a.tokens, "layers": a.layers, "kv_dim": a.kv_dim, "page_size": a.page_size,
                         "bytes": nbytes, "indices": "scattered pages"},
              "memcpy_seconds": memcpy, "memcpy_gbps": nbytes / memcpy / 1e9,
              "plan": plan_times(a.repeat), "layouts": {}}
    with kvcacheio.use(emu):
        for layout in a.layouts.split(","):
            host = [torch.zeros(host_shape(layout, geom, pool), dtype=torch.bfloat16)]
            rows = {}
            steps = _steps(layout, geom, host, dev, host_idx, dev_idx, a.layers)
            for name, step in steps.items():
                direction = name[:3]
                secs = median_seconds(step, a.repeat)
                plan = plan_pool_transfer(layout, geom, pool, host_idx, dev_idx, direction)
                if name == "h2d":
                    plan.launches = a.layers  # SGLang loads one layer per submission
                modeled = priced.model_seconds(plan)
                rows[name] = {"wall_seconds": secs, "gbps": nbytes / secs / 1e9, "ratio_vs_memcpy": memcpy / secs,
                              "segments": plan.num_segments, "launches": plan.launches, "modeled_seconds": modeled}
            result["layouts"][layout] = rows
    lines = [f"engine: {result['engine']}; contiguous torch copy of {nbytes / 1e6:.0f} MB: "
             f"{result['memcpy_gbps']:.2f} GB/s (median of {a.repeat})"]
    for layout, p in result["plan"].items():
        lines.append(f"plan seed config {layout}: {p['segments']:,} segments in {p['plan_seconds'] * 1e3:.2f} ms")
    lines.append(f"{'layout':<18}{'transfer':<14}{'segments':>10}{'GB/s':>8}{'x memcpy':>10}{'modeled ' + a.profile:>16}")
    for layout, rows in result["layouts"].items():
        for d, r in rows.items():
            m = f"{r['modeled_seconds'] * 1e3:.1f} ms" if r["modeled_seconds"] is not None else "unknown"
            lines.append(f"{layout:<18}{d:<14}{r['segments']:>10,}{r['gbps']:>8.2f}{r['ratio_vs_memcpy']:>10.2f}{m:>16}")
    emu.close()
    lf = result["layouts"].get("layer_first", {})
    measured = {f"plan_segments_{k}_seed": v["segments"] for k, v in result["plan"].items()}
    measured["plan_seconds_seed"] = result["plan"]["page_first_direct"]["plan_seconds"]
    default = (a.tokens, a.layers, a.kv_dim, a.page_size) == (8192, 78, 576, 64)
    if default and "d2h" in lf and "h2d_all_layer" in lf:  # the target's config: layer_first all-layer, both ways
        measured["transfer_ratio_vs_memcpy"] = min(lf["d2h"]["ratio_vs_memcpy"], lf["h2d_all_layer"]["ratio_vs_memcpy"])
    result["targets"], target_lines = check_targets(a.targets, measured)
    emit(result, a.json, lines + target_lines)
    return 0 if all(t["ok"] for t in result["targets"]) else 1
