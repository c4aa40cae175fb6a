"""Trace replay: Mooncake requests, in trace order, through the reference HiCache; hit and transfer figures.

Each request is matched, its L2 part loaded back, and all its full pages inserted (see
hicache_ref.cache). Capacities are token counts (rounded down to whole pages) that include
the live request; None means unlimited, i.e. sized to the whole trace so nothing is ever
evicted. Without `materialize` no KV memory exists: indices, plans, byte and segment
counts and the modeled clock all run, bytes do not. With it, pools of the given geometry
hold real bytes and every hit is checked bit for bit (`kv_mismatch_tokens`).

Completions are applied before each request whenever eviction is possible (finite
capacity, or real bytes), so the figures do not depend on thread timing; with unlimited
capacity nothing is evicted, locks decide nothing, and completions are applied as they
arrive, which keeps the scheduler thread from waiting on the transfer threads.

The default geometry is the P800 seed configuration (MLA latent, 78 layers, kv_dim 576,
bf16), so byte counts and modeled seconds are the ones that deployment would see.
"""

from __future__ import annotations

import time
from pathlib import Path

from hal.transfer.layouts import KVGeometry, parse_dtype
from hicache_ref.allocator import ORDERS
from hicache_ref.cache import HiCache
from hicache_ref.ghost import GhostList
from hicache_ref.policy import POLICIES
from hicache_ref.trace import TraceRequest, read_trace, request_tokens

SEED_GEOMETRY = {"attention": "mla", "layers": 78, "heads": 1, "kv_dim": 576, "dtype": "bf16"}
MATERIALIZE_LIMIT_BYTES = 16 << 30  # refuse pools larger than this: a typo should not eat the host
JSON_KEYS = ("requests", "input_tokens", "l1_hit_tokens", "l2_hit_tokens", "hit_rate", "d2h_tokens", "h2d_tokens",
             "d2h_bytes", "h2d_bytes", "d2h_segments", "h2d_segments", "modeled_transfer_seconds", "wall_seconds")


def make_geometry(page_size: int = 64, layers: int = 78, kv_dim: int = 576, attention: str = "mla", heads: int = 1,
                  dtype: str = "bf16") -> KVGeometry:
    return KVGeometry(attention, layers, heads, kv_dim, parse_dtype(dtype), page_size)


def _capacity(name: str, tokens: int | None, page_size: int, unlimited: int) -> int:
    if tokens is None:
        return unlimited
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"{name}: expected a non-negative number of tokens, got {tokens!r}")
    return tokens // page_size * page_size


def replay(trace: str | Path | list[TraceRequest], *, page_size: int = 64, l1_tokens: int | None = None,
           l2_tokens: int | None = None, write_policy: str = "write_through_selective", ghost: bool = False,
           ghost_entries: int | None = None, free_list: str = "fifo", limit: int | None = None,
           materialize: bool = False, layers: int = 78, kv_dim: int = 576, attention: str = "mla", heads: int = 1,
           dtype: str = "bf16", host_layout: str = "layer_first", profile: str | None = "emu",
           backend=None) -> dict:
    """Replay `trace` (a JSONL path or read requests) and return the figures (JSON_KEYS and more)."""
    if write_policy not in POLICIES:
        raise ValueError(f"write_policy: {write_policy!r} is not one of {', '.join(POLICIES)}")
    if free_list not in ORDERS:
        raise ValueError(f"free_list: {free_list!r} is not one of {', '.join(ORDERS)}")
    if ghost_entries is not None and (isinstance(ghost_entries, bool) or not isinstance(ghost_entries, int)
                                      or ghost_entries <= 0):
        raise ValueError(f"ghost_entries: expected a positive integer, got {ghost_entries!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit: expected a non-negative integer, got {limit!r}")
    geom = make_geometry(page_size, layers, kv_dim, attention, heads, dtype)
    t_read = time.perf_counter()
    requests = read_trace(trace, limit) if isinstance(trace, (str, Path)) else list(trace)[:limit]
    read_seconds = time.perf_counter() - t_read
    whole = sum(-(-r.input_length // page_size) * page_size for r in requests)
    l1 = _capacity("l1_tokens", l1_tokens, page_size, max(whole, page_size))
    l2 = _capacity("l2_tokens", l2_tokens, page_size, max(whole, page_size))
    if l1 < page_size:
        raise ValueError(f"l1_tokens: {l1_tokens} holds no whole page of {page_size} tokens")
    if materialize and (l1 + l2) * geom.token_bytes > MATERIALIZE_LIMIT_BYTES:
        raise ValueError(f"materialize: pools of {(l1 + l2) * geom.token_bytes / 2**30:.1f} GiB exceed "
                         f"{MATERIALIZE_LIMIT_BYTES >> 30} GiB; give l1/l2 capacities, a limit, or a smaller geometry")
    own_backend = backend is None
    if own_backend:
        from hal.backend import get_backend

        backend = get_backend("emu", profile)
    bound = ghost_entries if ghost_entries is not None else max(l1 // page_size, 1024)
    ghost_list = GhostList(bound) if ghost else None
    sync = materialize or l1_tokens is not None or l2_tokens is not None
    totals = dict(requests=0, input_tokens=0, l1_hit_tokens=0, l2_hit_tokens=0, l2_unloaded_tokens=0,
                  truncated_requests=0, kv_mismatch_tokens=0)
    compute = getattr(getattr(backend, "profile", None), "compute", None)
    saved = 0.0 if compute is not None else None
    t0 = time.perf_counter()
    cache = HiCache(geom, l1, l2, backend, layout=host_layout, policy=write_policy, ghost=ghost_list,
                    order=free_list, materialize=materialize, sync=sync)
    try:
        for r in requests:
            res = cache.request(request_tokens(r.hash_ids, r.input_length))
            totals["requests"] += 1
            totals["input_tokens"] += res.input_tokens
            totals["l1_hit_tokens"] += res.l1_hit_tokens
            totals["l2_hit_tokens"] += res.l2_hit_tokens
            totals["l2_unloaded_tokens"] += res.l2_unloaded_tokens
            totals["truncated_requests"] += res.truncated
            totals["kv_mismatch_tokens"] += res.kv_mismatch_tokens
            if saved is not None:
                saved = _add_saved(saved, compute, res)
    finally:
        cache.close()
        if own_backend:
            backend.close()
    wall = time.perf_counter() - t0
    return _figures(totals, cache, wall, read_seconds, saved, ghost_list, dict(
        page_size=page_size, l1_tokens=l1, l2_tokens=l2, l1_unlimited=l1_tokens is None,
        l2_unlimited=l2_tokens is None, write_policy=write_policy, free_list=free_list, host_layout=host_layout,
        materialize=materialize, profile=getattr(getattr(backend, "profile", None), "name", profile),
        geometry=dict(attention=attention, layers=layers, heads=heads, kv_dim=kv_dim, dtype=dtype)))


def _add_saved(saved: float | None, compute, res) -> float | None:
    """Modeled prefill seconds the hits save: T(n) - T(n - hit); None once the profile cannot say."""
    if saved is None:
        return None
    hit = res.l1_hit_tokens + res.l2_hit_tokens
    if not hit:
        return saved
    full, rest = compute.prefill_seconds(res.input_tokens), compute.prefill_seconds(res.input_tokens - hit)
    return None if full is None or rest is None else saved + full - rest


def _figures(t: dict, cache: HiCache, wall: float, read_seconds: float, saved, ghost_list, config: dict) -> dict:
    out = dict(t)
    out["hit_rate"] = (t["l1_hit_tokens"] + t["l2_hit_tokens"]) / t["input_tokens"] if t["input_tokens"] else 0.0
    ctl = cache.controller.stats() if cache.controller is not None else None
    for d in ("d2h", "h2d"):
        s = getattr(ctl, d) if ctl is not None else None
        out[f"{d}_tokens"] = s.tokens if s else 0
        out[f"{d}_bytes"] = s.bytes if s else 0
        out[f"{d}_segments"] = s.segments if s else 0
        out[f"{d}_transfers"] = s.transfers if s else 0
        out[f"modeled_{d}_seconds"] = s.modeled_seconds if s else 0.0
        out[f"max_{d}_enqueue_seconds"] = s.max_enqueue_seconds if s else 0.0
    out["modeled_transfer_seconds"] = ctl.modeled_seconds if ctl is not None else 0.0
    out["modeled_prefill_seconds_saved"] = saved
    out["wall_seconds"] = wall
    out["read_seconds"] = read_seconds
    out["tokens_per_second"] = t["input_tokens"] / wall if wall > 0 else None
    if ghost_list is not None:
        out["ghost"] = ghost_list.report()
    out.update(config)
    return out


def summary_lines(fig: dict) -> list[str]:
    """A human summary of `replay`'s figures."""
    gib = 2**30
    m = fig.get("modeled_transfer_seconds")
    cap = lambda k: "unlimited" if fig.get(f"{k}_unlimited") else f"{fig[f'{k}_tokens']:,}"  # noqa: E731
    return [
        f"requests {fig['requests']:,}, input tokens {fig['input_tokens']:,} (page {fig['page_size']}, "
        f"L1 {cap('l1')}, L2 {cap('l2')}, {fig['write_policy']}, {fig['host_layout']}, free list {fig['free_list']})",
        f"hit rate {fig['hit_rate']:.4f}: L1 {fig['l1_hit_tokens']:,} + L2 {fig['l2_hit_tokens']:,} tokens"
        + (f" ({fig['l2_unloaded_tokens']:,} L2 tokens recomputed: no L1 room)" if fig["l2_unloaded_tokens"] else ""),
        f"D2H {fig['d2h_tokens']:,} tokens, {fig['d2h_bytes'] / gib:.2f} GiB, {fig['d2h_segments']:,} segments; "
        f"H2D {fig['h2d_tokens']:,} tokens, {fig['h2d_bytes'] / gib:.2f} GiB, {fig['h2d_segments']:,} segments",
        f"modeled transfer time {'not modeled by this profile' if m is None else f'{m:.3f} s'} "
        f"(profile {fig['profile']}); wall {fig['wall_seconds']:.2f} s, "
        f"{(fig['tokens_per_second'] or 0) / 1e6:.1f} M tokens/s",
    ] + ([f"KV mismatches: {fig['kv_mismatch_tokens']:,} tokens"] if fig["materialize"] else [])
