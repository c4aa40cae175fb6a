"""Hit rate and net benefit that an L3 adds, on a trace, at a small L1 and L2 (`hicache bench l3`'s part).

`measure` replays the trace without L3, with L3 on each store asked for, and with unlimited L1.
L1 and L2 are small, so reuse beyond them can only come from L3.
The geometry is small, so the net benefit is an upper bound of the seed's.
The method: docs/architecture.md, "Design notes"; the figures: BENCHMARKS.md.
"""

from __future__ import annotations

import shutil
import time

from conformance.bench.common import check_trace, emit, machine
from conformance.common import args as arg_types
from conformance.common import scratch
from conformance.common.spec_options import add_spec_options
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.trace.reader import find_trace, read_trace
from hicache_ref.spec import CacheSpec

HELP = "hit rate and net benefit gained from an L3 (file, Mooncake) at a small L1/L2 on a trace"
STORES = ("file", "mooncake")
GEOMETRY = dict(attention="mla", layers=1, kv_dim=4, dtype="bf16")


def add_arguments(p) -> None:
    p.add_argument("--trace", help="Mooncake JSONL trace (default: the packaged conversation trace)")
    p.add_argument("--limit", type=arg_types.count(1), default=1500, help="the first N requests (default 1500)")
    add_spec_options(p, "bench l3_hits", filled=True)  # geometry, page size, profile as every command spells them
    p.add_argument("--store", action="append", choices=STORES, help="store(s) to measure (default: both)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def check(a) -> None:
    """--trace, where given, must be a readable text file (the rest is typed by argparse)."""
    check_trace(a)


def tiers_for(requests, page_size: int) -> tuple[int, int]:
    """(L1, L2): L1 the longest request in whole pages, L2 twice that."""
    longest = max((-(-r.input_length // page_size) * page_size for r in requests), default=page_size)
    return longest, 2 * longest


def _row(fig: dict, base: dict) -> dict:
    gain = lambda k: None if fig.get(k) is None or base.get(k) is None else fig[k] - base[k]  # noqa: E731
    return dict(hit_rate=fig["hit_rate"], hit_rate_gain=fig["hit_rate"] - base["hit_rate"],
                net_benefit_seconds=fig.get("net_benefit_seconds"), net_benefit_gain_seconds=gain("net_benefit_seconds"),
                l3_hit_tokens=fig["l3_hit_tokens"], l3_bytes_read=fig["l3_bytes_read"],
                l3_bytes_written=fig["l3_bytes_written"], l3_errors=fig["l3_errors"],
                l3_modeled_stall_seconds=fig.get("l3_modeled_stall_seconds", 0.0),
                kv_mismatch_tokens=fig["kv_mismatch_tokens"], wall_seconds=fig["wall_seconds"])


def _with_store(name: str, run):
    """run(storage spec) on a fresh store of kind `name`: (figures, None) or (None, why not measured)."""
    if name == "file":
        d = scratch.make_dir("bench-l3-")
        try:
            return run(f"file:{d}"), None
        finally:
            shutil.rmtree(d, ignore_errors=True)
    from hicache_ref.storage.mooncake_cluster import MooncakeCluster, unavailable_reason

    why = unavailable_reason()
    if why:
        return None, f"mooncake: {why}"
    with MooncakeCluster() as cluster:
        return run(cluster.spec + ",segment=1GiB"), None


def measure(trace=None, limit: int = 1500, page_size: int = 256, profile: str = "p800",
            stores=STORES, policy: str = "wait_complete") -> dict:
    """The figures of the module docstring: `without`, `unlimited` and one row per store in `stores`."""
    trace = trace or find_trace("conversation_trace.jsonl")
    requests = read_trace(trace, limit)
    l1, l2 = tiers_for(requests, page_size)
    base = CacheSpec.of(page_size=page_size, materialize=True, write_policy="write_through", profile=profile,
                        **GEOMETRY)
    small = dict(l1_tokens=l1, l2_tokens=l2)
    t0 = time.perf_counter()
    unlimited = replay(base, requests)
    without = replay(base.replace(**small), requests)
    rows = {}
    for name in stores:
        fig, why = _with_store(name, lambda spec: replay(base.replace(**small, l3=spec, prefetch_policy=policy),
                                                             requests))
        rows[name] = _row(fig, without) if fig is not None else dict(not_measured=why)
    return dict(trace=str(trace), requests=len(requests), page_size=page_size, l1_tokens=l1, l2_tokens=l2,
                geometry=GEOMETRY, profile=profile, prefetch_policy=policy,
                unlimited_hit_rate=unlimited["hit_rate"], without=_row(without, without), stores=rows,
                bench_wall_seconds=time.perf_counter() - t0)


def summary_lines(res: dict) -> list[str]:
    out = [f"{res['requests']:,} requests of {res['trace']}, page {res['page_size']}, L1 {res['l1_tokens']:,}, "
           f"L2 {res['l2_tokens']:,} tokens, profile {res['profile']}, {res['prefetch_policy']}; "
           f"unlimited hit rate {res['unlimited_hit_rate']:.4f}",
           _line("no L3", res["without"])]
    out += [f"{name}: not measured ({row['not_measured']})" if "not_measured" in row else _line(f"L3 {name}", row)
            for name, row in res["stores"].items()]
    return out


def _line(label: str, row: dict) -> str:
    net = row["net_benefit_seconds"]
    gain = row["net_benefit_gain_seconds"]
    return (f"{label}: hit rate {row['hit_rate']:.4f} ({row['hit_rate_gain']:+.4f}), net benefit "
            + ("not modeled" if net is None else f"{net:+.2f} s ({gain:+.2f} s)")
            + f", L3 hits {row['l3_hit_tokens']:,} tokens, read {row['l3_bytes_read'] / 2**20:.1f} MiB, "
            f"written {row['l3_bytes_written'] / 2**20:.1f} MiB, {row['l3_errors']} errors, "
            f"KV mismatches {row['kv_mismatch_tokens']}, wall {row['wall_seconds']:.1f} s")


def run(a) -> int:
    trace = a.trace if a.trace is not None else find_trace("conversation_trace.jsonl")
    res = measure(trace, a.limit, a.page_size, a.profile, tuple(a.store or STORES))
    res["machine"] = machine()
    emit(res, a.json, summary_lines(res))
    return 1 if any(r.get("kv_mismatch_tokens") for r in res["stores"].values()) else 0
