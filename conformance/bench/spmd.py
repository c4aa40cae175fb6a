"""`hicache bench spmd`: N TP ranks, shared vs private host pool, in the same run.

Both modes run the same seeded workload (hicache_ref.tp) on the same number of rank processes,
alternating (shared, private, shared without the self-check, ...) so background load hits all
alike; figures are medians over --repeat runs of each. Per mode: host KV bytes (distinct bytes
behind all ranks' pools), D2H bytes over all ranks, wall time of the ranks' workload loop (the
slowest rank; the group's start-up is reported apart). The SPMD self-check's overhead is the
shared run's wall time over that of the same run with decision logging and digest comparison
off, minus one; the time the ranks spend logging and in the comparisons (which includes
waiting for the slowest rank) is reported as fractions of the run too. Expected: shared /
private host bytes and D2H bytes both 1/N, and one decision digest for both.
"""

from __future__ import annotations

import statistics
import time

from conformance.bench.common import emit, machine
from conformance.common import args as types
from hicache_ref.tp.launch import launch
from hicache_ref.tp.report import report
from hicache_ref.tp.workload import WorkloadConfig

HELP = "TP ranks with a shared vs private host pool: host and D2H bytes, wall time, self-check overhead"
TIMED = ("wall_seconds", "startup_seconds", "log_fraction", "check_fraction")


def add_arguments(p) -> None:
    p.add_argument("--tp", type=types.count(2, 64), default=4, help="TP ranks (processes) of each run")
    p.add_argument("--ops", type=types.count(1, 1_000_000), default=1000, help="workload operations per rank")
    p.add_argument("--seed", type=types.count(0), default=0, help="workload seed")
    p.add_argument("--check-every", type=types.count(1), default=WorkloadConfig.check_every,
                   help="compare the ranks' decision digests every K ops")
    p.add_argument("--shared-dir", default="/dev/shm", help="directory of the shared runs' pool file")
    p.add_argument("--repeat", type=types.positive, default=3, help="runs of each mode; medians are reported")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def check(a) -> None:
    """--shared-dir must take a shared pool file; CliError naming it otherwise."""
    from conformance.common.errors import CliError
    from hal.memory import shm

    try:
        shm.validate_dir(a.shared_dir, 1)
    except ValueError as e:
        raise CliError("--shared-dir", str(e).removeprefix("shared_dir: ")) from None


def _once(cfg: WorkloadConfig, ranks: int) -> dict:
    t0 = time.perf_counter()
    outcomes = launch(cfg, ranks)
    total = time.perf_counter() - t0
    bad = [f"rank {o.rank}: {o.payload}" for o in outcomes if o.status != "ok"]
    if bad:
        raise RuntimeError("; ".join(bad))
    results = outcomes[0].payload
    rep = report(cfg, results)
    wall = max(r["wall_seconds"] for r in results)
    frac = lambda key: max(r[key] / r["wall_seconds"] for r in results if r["wall_seconds"] > 0)  # noqa: E731
    return {"digest": rep["digest"], "consistent": rep["consistent"], "read_mismatches": rep["read_mismatches"],
            "host_bytes_total": rep["host_bytes_total"], "d2h_bytes_total": sum(rep["d2h_bytes_by_rank"].values()),
            "d2h_bytes_by_rank": rep["d2h_bytes_by_rank"], "wall_seconds": wall, "startup_seconds": total - wall,
            "log_fraction": frac("log_seconds"), "check_fraction": frac("check_seconds")}


def run(a) -> int:
    base = dict(ops=a.ops, seed=a.seed, check_every=a.check_every)
    modes = {"shared": dict(shared=True, shared_dir=a.shared_dir), "private": {},
             "shared_unchecked": dict(shared=True, shared_dir=a.shared_dir, self_check=False)}
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    _once(WorkloadConfig(**dict(base, ops=1)), a.tp)  # warm-up: the forkserver imports torch once
    for _ in range(a.repeat):
        for mode, kw in modes.items():
            runs[mode].append(_once(WorkloadConfig(**base, **kw), a.tp))
    med = {mode: dict(rs[0], **{k: statistics.median(r[k] for r in rs) for k in TIMED}) for mode, rs in runs.items()}
    s, p, u = med["shared"], med["private"], med["shared_unchecked"]
    result = {"machine": machine(), "ranks": a.tp, "ops": a.ops, "seed": a.seed, "check_every": a.check_every,
              "repeat": a.repeat, "shared": s, "private": p, "shared_unchecked": u,
              "host_bytes_ratio": s["host_bytes_total"] / p["host_bytes_total"],
              "d2h_bytes_ratio": s["d2h_bytes_total"] / p["d2h_bytes_total"] if p["d2h_bytes_total"] else None,
              "self_check_overhead": s["wall_seconds"] / u["wall_seconds"] - 1 if u["wall_seconds"] > 0 else None,
              "same_digest": s["digest"] == p["digest"]}
    lines = [f"{a.tp} ranks, {a.ops} ops, seed {a.seed}, check every {a.check_every} ops, median of {a.repeat}",
             "| mode | host KV bytes | D2H bytes (all ranks) | wall s | start-up s | logging | comparing |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for mode in ("shared", "private"):
        m = med[mode]
        lines.append(f"| {mode} | {m['host_bytes_total']:,} | {m['d2h_bytes_total']:,} | {m['wall_seconds']:.3f} | "
                     f"{m['startup_seconds']:.3f} | {m['log_fraction']:.1%} | {m['check_fraction']:.1%} |")
    lines.append(f"| shared, no self-check | {u['host_bytes_total']:,} | {u['d2h_bytes_total']:,} | "
                 f"{u['wall_seconds']:.3f} | {u['startup_seconds']:.3f} | - | - |")
    over = result["self_check_overhead"]
    lines.append(f"shared/private: host bytes {result['host_bytes_ratio']:.4f}, D2H bytes "
                 f"{result['d2h_bytes_ratio']:.4f} (expected 1/{a.tp} = {1 / a.tp:.4f}); "
                 f"same digest: {result['same_digest']}; self-check overhead "
                 f"{'n/a' if over is None else f'{over:+.1%}'} of the shared run's wall time")
    emit(result, a.json, lines)
    ok = result["same_digest"] and s["consistent"] and p["consistent"] and not s["read_mismatches"] \
        and not p["read_mismatches"]
    return 0 if ok else 1
