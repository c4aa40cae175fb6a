"""What a Mooncake trace asks of a cache: `hicache trace stats`.

Prefix reuse rate, the unlimited-capacity hit rate, and reuse distances (LRU stack distances in
tokens), which give the hit-rate curve over every capacity (and the hit rate of one L1 size alone).
Definitions: hicache_ref/README.md,
"Traces".
"""

from __future__ import annotations

import numpy as np

from hicache_ref.sim.trace.reader import BLOCK_TOKENS, TraceRequest
from hicache_ref.sim.trace.stack_distance import stack_profile

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


FITS_IN_L1 = ("fits in L1: L1 alone already hits every prefix this trace reuses, so HiCache (L2, L3) cannot "
              "help it; it can only add transfers")


def pressure(profile, page_size: int, l1_tokens: int | None, l2_tokens: int | None) -> dict:
    """What the trace asks of the tiers: its working set (the distinct whole pages it caches, tokens)
    against L1 and L1 + L2, and whether L1 alone, or L1 and L2, reach every reuse an unlimited cache
    gets (fits_in_l1: HiCache cannot help; LRU over pages, one pass, an upper bound of a replay)."""
    # distinct pages: each request caches its full pages past the leading ones already cached
    whole = int((profile.full_pages - profile.seen_pages).clip(min=0).sum()) * page_size
    unlimited = int(profile.seen_pages.sum()) * page_size
    out = dict(block_tokens=BLOCK_TOKENS, working_set_tokens=whole, unlimited_hit_tokens=unlimited)
    if l1_tokens is not None:
        l1_hits = int(profile.hit_pages([l1_tokens // page_size])[0]) * page_size
        out.update(l1_tokens=l1_tokens, working_set_over_l1=whole / l1_tokens if l1_tokens else None,
                   fits_in_l1=l1_hits >= unlimited)
        if l2_tokens is not None:
            both = l1_tokens + l2_tokens
            hits = int(profile.hit_pages([both // page_size])[0]) * page_size
            out.update(l2_tokens=l2_tokens, working_set_over_l1_l2=whole / both if both else None,
                       fits_in_l1_l2=hits >= unlimited, l1_l2_hit_rate=hits / max(profile.input_tokens, 1))
    return out


def trace_stats(requests: list[TraceRequest], page_size: int = 64, l1_tokens: int | None = None,
                l2_tokens: int | None = None) -> dict:
    """The figures of the module docstring for `requests` (in trace order) at `page_size`; with
    `l1_tokens`, also `l1_hit_rate`: the hit rate of an LRU cache of that many tokens alone; always
    `pressure` (the working set against the tiers given, `fits_in_l1` with an L1)."""
    for name, v in (("l1_tokens", l1_tokens), ("l2_tokens", l2_tokens)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"{name}: expected a whole number of tokens >= 0, got {v!r}")
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
        pressure=pressure(profile, page_size, l1_tokens, l2_tokens),
        **({} if l1_tokens is None else dict(l1_tokens=l1_tokens, l1_hit_rate=float(profile.hit_rate([l1_tokens])[0]))))
