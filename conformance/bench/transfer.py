"""`hicache bench transfer`: plan time, and scattered all-layer copies vs one contiguous copy, per layout.

On emu (the default) the copies are CPU copies and the peer is one contiguous CPU copy; with
`--backend cuda|xpu` they run on the device from pinned host pools, the peer is one contiguous
H2D copy, and `--copy-mode descriptor` issues one async copy per merged segment (the seed's
39,936 for page_first_direct), `gather` gathers rows above 64 segments (hal.backends.support.copy_modes).
"""

from __future__ import annotations

import numpy as np
import torch

from conformance.bench.common import check_targets, emit, machine, median_seconds
from conformance.common import args as arg_types
from conformance.common.errors import CliError, clip
from conformance.common.inputs import load_profile_arg
from conformance.common.spec_options import add_spec_options
from hal.backend import backend_class, get_backend
from hal.common.units import HELP as UNITS
from hal.memory.budget import refuse_over
from hal.transfer import kvcacheio, segcopy
from hal.transfer import pool_ops as pool_transfer
from hal.transfer.layouts import MLA_LAYOUTS, KVGeometry, host_shape
from hal.transfer.plan import plan_pool_transfer
from hal.transfer.seed import seed_geometry, seed_plan
from hal.transfer.slots import INDEX_BYTES_PER_TOKEN, scattered_pool_slots, slot_indices

HELP = "plan time for the seed config and transfer bandwidth per host layout vs a contiguous copy (emu or a device)"
COPY_MODES = ("descriptor", "gather")


def add_arguments(p) -> None:
    p.add_argument("--backend", default="emu", help="where the copies run: emu (default, this CPU), cuda or xpu")
    p.add_argument("--copy-mode", choices=COPY_MODES, default=None,
                   help="cuda/xpu: descriptor (one async copy per segment) or gather (rows gathered above 64 "
                        "segments); default: $HICACHE_COPY_MODE, else gather")
    p.add_argument("--tokens", type=arg_types.size(), default=8192, help=f"tokens moved per transfer (scattered pages; {UNITS})")
    add_spec_options(p, "bench transfer", filled=True)  # geometry, page size, profile as every command spells them
    p.add_argument("--host-layout", default="layer_first,page_first_direct,page_first",
                   help=f"host layouts timed, comma-separated ({', '.join(MLA_LAYOUTS)})")
    p.add_argument("--targets", default="emu",
                   help="profile whose targets the measured figures are checked against (this machine's class; "
                        "with a device backend, 'emu' means --profile)")
    p.add_argument("--repeat", type=arg_types.positive, default=5, help="timed runs; medians are reported")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def check(a) -> None:
    """Refused before it runs, naming the option: unknown layouts and profiles, a --tokens that is
    not whole pages (the kvcacheio ops move whole pages), pools larger than this machine can give."""
    layouts = [x for x in a.host_layout.split(",") if x]
    bad = [x for x in layouts if x not in MLA_LAYOUTS]
    if bad or not layouts:
        raise CliError("--host-layout", f"{clip(', '.join(bad) or repr(a.host_layout))}: expected a "
                                        f"comma-separated list of {', '.join(MLA_LAYOUTS)}")
    for option in ("--profile", "--targets"):
        load_profile_arg(option, getattr(a, option.removeprefix("--")))
    if a.tokens % a.page_size:
        raise CliError("--tokens", f"{a.tokens:,} is not a whole number of pages of --page-size {a.page_size}")
    geom = seed_geometry(layers=a.layers, kv_dim=a.kv_dim, page_size=a.page_size)
    pool = scattered_pool_slots(a.tokens, a.page_size)
    # device pool, one host pool at a time, the contiguous copy's source and destination, the indices
    needed = 2 * pool * geom.token_bytes + 2 * a.tokens * geom.token_bytes + pool * INDEX_BYTES_PER_TOKEN
    refuse_over("--tokens", needed, f"device and host pools of {pool:,} slots x {a.layers} layers x "
                                    f"{geom.item_size} B, plus the contiguous copy")


def plan_times(repeat: int) -> dict:
    """Segments and median planning time of the seed transfer (hal.transfer.seed)."""
    out = {}
    for layout in ("layer_first", "page_first_direct"):
        secs = median_seconds(lambda lay=layout: seed_plan(lay), repeat)
        out[layout] = {"segments": seed_plan(layout).num_segments, "plan_seconds": secs}
    return out


def open_backend(a):
    """The backend the copies run on, in the copy mode asked for; refused naming the option first."""
    try:
        cls = backend_class(a.backend)
    except (ValueError, ImportError) as e:
        raise CliError("--backend", clip(str(e).removeprefix("backend: "), 200)) from None
    ok, why = cls.probe()
    if not ok:
        raise CliError("--backend", f"backend {a.backend!r} is not available here: {why}")
    if a.copy_mode is not None and a.copy_mode not in cls.copy_modes:
        raise CliError("--copy-mode", f"backend {a.backend!r} has no copy modes (it runs plans one way)")
    backend = get_backend(a.backend, cls.default_profile)
    return backend.with_copy_mode(a.copy_mode) if a.copy_mode is not None else backend


def _memcpy_seconds(nbytes: int, repeat: int, backend) -> float:
    """The peer: one contiguous copy of the same bytes (CPU to CPU on emu, pinned host to device on
    a device), buffers freed afterwards."""
    if backend.device_type == "cpu":
        src, dst = torch.ones(nbytes, dtype=torch.uint8), torch.zeros(nbytes, dtype=torch.uint8)
        return median_seconds(lambda: dst.copy_(src), repeat)
    src, dst = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True), backend.alloc_device((nbytes,), torch.uint8)
    stream = backend.default_stream()

    def h2d() -> None:
        dst.copy_(src, non_blocking=True)
        stream.synchronize()

    return median_seconds(h2d, repeat)


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
    backend = open_backend(a)
    if backend.device_type != "cpu" and a.targets == "emu":
        a.targets = a.profile  # the emu targets describe this CPU, not the device
    pinned = backend.device_type != "cpu"  # DMA from pageable memory would be staged, not measured
    priced = get_backend("count", a.profile)  # prices the plans on the modeled clock, moves nothing
    pricing = priced.profile.name  # the profile whose link model the modeled column is, as loaded
    geom = KVGeometry("mla", a.layers, 1, a.kv_dim, torch.bfloat16, a.page_size)
    pool = scattered_pool_slots(a.tokens, a.page_size)
    rng = np.random.default_rng(0)
    dev_idx = slot_indices(a.tokens, a.page_size, True, rng)
    host_idx = slot_indices(a.tokens, a.page_size, True, rng)
    dev = [[backend.alloc_device((pool, 1, a.kv_dim), torch.bfloat16).fill_(1) for _ in range(a.layers)]]
    nbytes = a.tokens * geom.layout_dim
    memcpy = _memcpy_seconds(nbytes, a.repeat, backend)
    engine = segcopy.engine() if backend.device_type == "cpu" else f"{backend.name} device copies"
    result = {"machine": machine(), "engine": engine, "profile": pricing,
              "backend": backend.name, "backend_profile": backend.profile.name if backend.profile else None, "copy_mode": backend.copy_mode,
              "peer": "contiguous torch copy" if backend.device_type == "cpu" else "contiguous pinned H2D copy",
              "config": {"tokens": a.tokens, "layers": a.layers, "kv_dim": a.kv_dim, "page_size": a.page_size,
                         "bytes": nbytes, "indices": "scattered pages"},
              "memcpy_seconds": memcpy, "memcpy_gbps": nbytes / memcpy / 1e9,
              "plan": plan_times(a.repeat), "layouts": {}}
    with kvcacheio.use(backend):
        for layout in a.host_layout.split(","):
            host = [torch.zeros(host_shape(layout, geom, pool), dtype=torch.bfloat16, pin_memory=pinned)]
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
    mode = f", copy mode {backend.copy_mode}" if backend.copy_mode else ""
    lines = [f"backend: {backend.name}{mode}; engine: {result['engine']}; {result['peer']} of {nbytes / 1e6:.0f} MB: "
             f"{result['memcpy_gbps']:.2f} GB/s (median of {a.repeat}); modeled: profile {pricing}'s link model"]
    for layout, p in result["plan"].items():
        lines.append(f"plan seed config {layout}: {p['segments']:,} segments in {p['plan_seconds'] * 1e3:.2f} ms")
    lines.append(f"{'layout':<18}{'transfer':<14}{'segments':>10}{'GB/s':>8}{'x memcpy':>10}{'modeled ' + pricing:>16}")
    for layout, rows in result["layouts"].items():
        for d, r in rows.items():
            m = f"{r['modeled_seconds'] * 1e3:.1f} ms" if r["modeled_seconds"] is not None else "unknown"
            lines.append(f"{layout:<18}{d:<14}{r['segments']:>10,}{r['gbps']:>8.2f}{r['ratio_vs_memcpy']:>10.2f}{m:>16}")
    backend.close()
    lf = result["layouts"].get("layer_first", {})
    measured = {f"plan_segments_{k}_seed": v["segments"] for k, v in result["plan"].items()}
    measured["plan_seconds_seed"] = result["plan"]["page_first_direct"]["plan_seconds"]
    default = (a.tokens, a.layers, a.kv_dim, a.page_size) == (8192, 78, 576, 64)
    if default and "d2h" in lf and "h2d_all_layer" in lf:  # the target's config: layer_first all-layer, both ways
        measured["transfer_ratio_vs_memcpy"] = min(lf["d2h"]["ratio_vs_memcpy"], lf["h2d_all_layer"]["ratio_vs_memcpy"])
    result["targets"], target_lines = check_targets(a.targets, measured)
    emit(result, a.json, lines + target_lines)
    return 0 if all(t["ok"] for t in result["targets"]) else 1
