"""What a Mooncake trace asks of a cache: `hicache trace stats`.

Prefix reuse rate, the unlimited-capacity hit rate, and reuse distances (LRU stack distances in
tokens), which give the hit-rate curve over every capacity (and the hit rate of one L1 size alone).
Definitions: hicache_ref/README.md,
"Traces".
"""

from __future__ import annotations

import numpy as np

from hicache_ref.sim.stack_distance import stack_profile
from hicache_ref.sim.trace import BLOCK_TOKENS, TraceRequest

PERCENTILES = (0, 10, 50, 90, 99, 100)


def prefix_reuse_tokens(requests: list[TraceRequest]) -> list[int]:
    """Per request: input tokens in its leading run of blocks seen before (the definition above)."""
    seen: set[tuple[int, int]] = set()
    chains: dict[tuple[int, int], int] = {}
    out = []
    for r in requests:
        chain, reused, leading = 0, 0, True
        for k, h in enumerate(r.hash_ids):
            key = (chain, h)
            if leading and key in seen:
                reused += min(BLOCK_TOKENS, r.input_length - k * BLOCK_TOKENS)
            else:
                leading = False
            chain = chains.setdefault(key, len(chains) + 1)
            seen.add(key)
        out.append(reused)
    return out


def _percentiles(values) -> dict:
    v = np.asarray(values)
    if not len(v):
        return {f"p{p}": None for p in PERCENTILES}
    return {f"p{p}": int(np.percentile(v, p, method="lower")) for p in PERCENTILES}


def _histogram(distances: np.ndarray, edges: list[int]) -> list[dict]:
    """Reused pages per distance bin: [previous edge, edge) tokens, the last bin open-ended."""
    counts = np.bincount(np.searchsorted(edges, distances, side="right"), minlength=len(edges) + 1)
    lows = [0, *edges]
    return [dict(from_tokens=lo, below_tokens=hi, pages=int(c))
            for lo, hi, c in zip(lows, [*edges, None], counts, strict=True)]


def capacity_points(whole_tokens: int, page_size: int) -> list[int]:
    """Capacities (tokens, powers of two from one page up to the whole trace) for the curve."""
    points, c = [], page_size
    while c < whole_tokens:
        points.append(c)
        c *= 2
    return points + [max(whole_tokens, page_size)]


def trace_stats(requests: list[TraceRequest], page_size: int = 64, l1_tokens: int | None = None) -> dict:
    """The figures of the module docstring for `requests` (in trace order) at `page_size`; with
    `l1_tokens`, also `l1_hit_rate`: the hit rate of an LRU cache of that many tokens alone."""
    if l1_tokens is not None and (isinstance(l1_tokens, bool) or not isinstance(l1_tokens, int) or l1_tokens < 0):
        raise ValueError(f"l1_tokens: expected a whole number of tokens >= 0, got {l1_tokens!r}")
    profile = stack_profile(requests, page_size)
    lengths = [r.input_length for r in requests]
    total = sum(lengths)
    reused = sum(prefix_reuse_tokens(requests))
    distances = profile.distances() * page_size
    times = [r.timestamp for r in requests]
    whole = int(profile.full_pages.sum()) * page_size
    caps = capacity_points(whole, page_size)
    span = (max(times) - min(times)) / 1000 if times else 0.0
    return dict(
        requests=len(requests), input_tokens=total, output_tokens=sum(r.output_length for r in requests),
        page_size=page_size, input_length=dict(_percentiles(lengths), mean=total / len(requests) if requests else None),
        output_length=_percentiles([r.output_length for r in requests]),
        prefix_reuse_rate=reused / total if total else 0.0,
        unlimited_hit_rate=int(profile.seen_pages.sum()) * page_size / total if total else 0.0,
        reused_pages=int(len(distances)), reuse_distance_tokens=_percentiles(distances),
        reuse_distance_histogram=_histogram(distances, caps),
        hit_rate_by_capacity=[dict(capacity_tokens=c, hit_rate=float(h))
                              for c, h in zip(caps, profile.hit_rate(caps), strict=True)],
        duration_seconds=span, requests_per_second=(len(requests) - 1) / span if span > 0 else None,
        **({} if l1_tokens is None else dict(l1_tokens=l1_tokens, l1_hit_rate=float(profile.hit_rate([l1_tokens])[0]))))
