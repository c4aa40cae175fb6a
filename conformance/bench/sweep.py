"""`hicache bench sweep`: an 8-tier L2 sweep of a trace against one replay at its largest tier, same run.

The sweep (hicache_ref.sim.sweep.sweep_l2, LRU with write_through: the one-pass stack-distance
curve plus one replay with L1 alone) must take at most 3x the wall time of one
hicache_ref.sim.run.serial_replay at the largest tier. Tiers: 8, geometric from 2 x L1 to the trace's full-page
tokens W; L1 = W/128 but at least twice the longest request; page 64, not materialized. The replay at the largest tier
also checks the curve there: the one-pass hit rate is an upper bound of the tree's
(whole-node eviction, split tails; hicache_ref.sim.trace.stack_distance), and the difference
is reported. `--check-tiers` replays every tier too (parallel processes) and reports the
largest difference.

Runs alternate (replay, sweep, replay, ...) after a full garbage collection each; medians.
"""

from __future__ import annotations

import gc
import statistics
import time

from conformance.bench.common import check_trace, emit, machine
from conformance.common import args as arg_types
from conformance.common.spec_options import add_spec_options
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.sweep.sweep_l2 import sweep
from hicache_ref.sim.trace.reader import find_trace, read_trace
from hicache_ref.spec import CacheSpec

HELP = "8-tier L2 sweep (one-pass stack distances) vs one replay at the largest tier: wall time ratio <= 3"
TIERS = 8
TARGET_RATIO = 3.0


def add_arguments(p) -> None:
    p.add_argument("--trace", help="Mooncake JSONL trace (default: the packaged conversation trace)")
    add_spec_options(p, "bench sweep", filled=True)  # geometry, page size, profile as every command spells them
    p.add_argument("--limit", type=arg_types.count(1), help="only the first N requests")
    p.add_argument("--repeat", type=arg_types.positive, default=1, help="timed runs; medians are reported")
    p.add_argument("--check-tiers", action="store_true", help="also replay every tier and report the largest "
                                                              "hit-rate difference from the one-pass curve")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def check(a) -> None:
    """Refused before it runs: a trace that is missing, not text or empty."""
    check_trace(a)


def tiers_for(requests, page_size: int) -> tuple[int, list[int]]:
    """(L1, tiers): L1 = W/128 but at least twice the longest request (no request cut to fit),
    then 8 tiers geometric from 2 x L1 to W, W the trace's full-page tokens; whole pages."""
    whole = sum(r.input_length // page_size for r in requests) * page_size
    longest = max((-(-r.input_length // page_size) * page_size for r in requests), default=page_size)
    l1 = max(whole >> 7, 2 * longest) // page_size * page_size
    top = max(whole, 4 * l1)
    tiers = [int(2 * l1 * (top / (2 * l1)) ** (k / (TIERS - 1))) // page_size * page_size for k in range(TIERS)]
    return l1, sorted(set(tiers))


def run(a) -> int:
    trace = a.trace if a.trace is not None else find_trace("conversation_trace.jsonl")
    requests = read_trace(trace, a.limit)
    l1, tiers = tiers_for(requests, a.page_size)
    spec = CacheSpec.of(page_size=a.page_size, l1_tokens=l1, l2_tokens=tiers[-1], write_policy="write_through",
                        profile="emu")
    replays, sweeps, result_sweep, fig = [], [], None, None
    for _ in range(a.repeat):
        gc.collect()
        fig = replay(spec, requests)
        replays.append(fig["wall_seconds"])
        gc.collect()
        t0 = time.perf_counter()
        result_sweep = sweep(spec, requests, tiers, method="one_pass")
        sweeps.append(time.perf_counter() - t0)
    r_med, s_med = statistics.median(replays), statistics.median(sweeps)
    top = result_sweep["tiers"][-1]
    ratio = s_med / r_med
    result = {"machine": machine(), "trace": str(trace), "requests": fig["requests"], "input_tokens": fig["input_tokens"],
              "config": {"page_size": a.page_size, "l1_tokens": l1, "l2_tiers": tiers, "write_policy": "write_through",
                         "repeat": a.repeat},
              "replay_largest_tier": {"wall_seconds": replays, "median_wall_seconds": r_med, "hit_rate": fig["hit_rate"]},
              "sweep": {"method": result_sweep["method"], "wall_seconds": sweeps, "median_wall_seconds": s_med,
                        "hit_rates": [t["hit_rate"] for t in result_sweep["tiers"]],
                        "l1_alone_hit_rate": result_sweep["l1_alone_hit_rate"],
                        "plateau_l2_tokens": result_sweep["plateau_l2_tokens"],
                        "on_plateau": result_sweep["on_plateau"]},
              "sweep_over_replay": ratio, "target_ratio": TARGET_RATIO, "ok": ratio <= TARGET_RATIO,
              "largest_tier_hit_rate_difference": top["hit_rate"] - fig["hit_rate"]}
    lines = [f"trace {trace}: {fig['requests']:,} requests, {fig['input_tokens']:,} input tokens, page {a.page_size}, "
             f"L1 {l1:,}, {len(tiers)} L2 tiers {tiers[0]:,} .. {tiers[-1]:,} tokens, write_through",
             f"one replay at the largest tier: median {r_med:.2f} s, hit rate {fig['hit_rate']:.4f}",
             f"sweep of {len(tiers)} tiers ({result_sweep['method']}): median {s_med:.2f} s; "
             f"hit rates {', '.join(f'{h:.4f}' for h in result['sweep']['hit_rates'])}",
             f"{'PASS' if result['ok'] else 'FAIL'} sweep / replay {ratio:.2f}x (target <= {TARGET_RATIO:g}x); "
             f"one-pass minus replay hit rate at the largest tier {result['largest_tier_hit_rate_difference']:+.5f}"]
    if a.check_tiers:
        per = sweep(spec, requests, tiers, method="replay")
        diffs = [o["hit_rate"] - p["hit_rate"] for o, p in zip(result_sweep["tiers"], per["tiers"], strict=True)]
        result["per_tier_hit_rate_difference"] = diffs
        lines.append("one-pass minus replay, per tier: " + ", ".join(f"{d:+.5f}" for d in diffs))
    emit(result, a.json, lines)
    return 0 if result["ok"] else 1
