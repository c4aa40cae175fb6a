"""`hicache bench replay --engine sglang`: SGLang's own HiCache (the sglang engine) timed on the
same slice as the reference, and where its time goes.

SGLang's import is timed apart by the caller (tens of seconds, once per process); then
`repeat` timed runs, and one more under cProfile whose own time is summed by where the
code lives (SGLang's tree core, radix cache, controller, host pools; the HAL; torch; the rest).
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import statistics
import time

# (label, path fragment) in match order: the first fragment a function's file contains wins.
AREAS = (
    ("sglang tree core (unified_tree_core)", "sglang/srt/mem_cache/unified_cache/"),
    ("sglang UnifiedRadixCache", "sglang/srt/mem_cache/unified_radix_cache.py"),
    ("sglang cache controller", "sglang/srt/managers/cache_controller.py"),
    ("sglang hybrid controller / assembler", "sglang/srt/mem_cache/hybrid_cache/"),
    ("sglang L2 transfer", "sglang/srt/mem_cache/l2_transfer.py"),
    ("sglang host pools", "sglang/srt/mem_cache/pool_host/"),
    ("sglang allocator", "sglang/srt/mem_cache/allocator/"),
    ("sglang, other", "sglang/"),
    ("HAL transfer (kvcacheio, plans, emu copies)", "/hal/"),
    ("engine seam (hicache_ref.engines)", "hicache_ref/engines/"),
    ("torch", "torch/"),
)


def _area(filename: str) -> str:
    for label, frag in AREAS:
        if frag in filename:
            return label
    if filename.startswith("~") or "<" in filename:
        return "C calls (torch ops, numpy, locks and queues)"
    return "python stdlib and other"


def profile_breakdown(stats: pstats.Stats, top: int = 8) -> dict:
    """Own time (tottime) summed per area, and the costliest functions, from one profiled run."""
    areas: dict[str, float] = {}
    funcs = []
    for (filename, line, name), (_, _, tottime, _, _) in stats.stats.items():
        label = _area(filename)
        areas[label] = areas.get(label, 0.0) + tottime
        funcs.append((tottime, f"{filename.split('site-packages/')[-1]}:{line}({name})"))
    total = sum(areas.values()) or 1.0
    return {"total_seconds": total,
            "areas": {k: {"seconds": v, "share": v / total} for k, v in sorted(areas.items(), key=lambda kv: -kv[1])},
            "top_functions": [{"seconds": s, "function": f} for s, f in sorted(funcs, reverse=True)[:top]]}


# SGLang's pools are real memory, the reference's bench run moves none: one layer of a 128-wide
# latent keeps an unlimited-capacity slice in memory (hit tokens do not depend on the row width).
SMALL_ROWS = dict(layers=1, kv_dim=128)


def time_sglang(spec, requests, repeat: int) -> dict:
    """The sglang engine on `requests`: import seconds, timed runs, one profiled run's breakdown."""
    from hicache_ref.engines.sglang.engine_replay import replay_sglang

    spec = spec.replace(**SMALL_ROWS)

    walls, cpus, fig = [], [], None
    for _ in range(repeat):
        gc.collect()
        c0 = time.process_time()
        fig = replay_sglang(spec, requests)
        cpus.append(time.process_time() - c0)
        walls.append(fig["wall_seconds"])
    prof = cProfile.Profile()
    prof.enable()
    replay_sglang(spec, requests)
    prof.disable()
    med = statistics.median(walls)
    return {"name": "sglang engine (SGLang 0.5.23 UnifiedRadixCache + cache controller + host pools on the HAL)",
            "wall_seconds": walls, "median_wall_seconds": med,
            "median_cpu_seconds": statistics.median(cpus), "tokens_per_second": fig["input_tokens"] / med,
            "hit_tokens": fig["l1_hit_tokens"] + fig["l2_hit_tokens"], "d2h_tokens": fig["d2h_tokens"],
            "h2d_tokens": fig["h2d_tokens"], "geometry": SMALL_ROWS, "backend": "emu (moves bytes)", "profile": profile_breakdown(pstats.Stats(prof))}


def summary_lines(res: dict, ours_median: float, ours_hits: int, tokens: int) -> list[str]:
    med = res["median_wall_seconds"]
    p = res["profile"]
    areas = ", ".join(f"{k} {v['share'] * 100:.0f}%" for k, v in list(p["areas"].items())[:6])
    return [f"sglang engine: median {med:.2f} s wall ({', '.join(f'{x:.2f}' for x in res['wall_seconds'])}), "
            f"{tokens / med / 1e6:.2f} M tokens/s, {med / ours_median:.1f}x the reference; hit tokens "
            f"{res['hit_tokens']:,} (reference {ours_hits:,}); import {res['import_seconds']:.1f} s (once, untimed)",
            f"sglang engine's own time by area (cProfile, {p['total_seconds']:.2f} s): {areas}"]
