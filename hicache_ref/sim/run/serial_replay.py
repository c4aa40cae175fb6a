"""Trace replay: Mooncake requests, in trace order, through the reference HiCache; hit and transfer figures.

Each request goes through hicache_ref.core.cache: match, load back, insert.
Without `materialize` no KV memory exists and bytes do not move; with it every hit is checked bit for bit.
Figures do not depend on thread timing.
What to replay on is a hicache_ref.spec.CacheSpec.
Capacities and completion rules: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from pathlib import Path

from hicache_ref.core.cache import HiCache
from hicache_ref.sim.price import cost, spread
from hicache_ref.sim.price.prefill_model import compute_of
from hicache_ref.sim.run.baseline import is_off, off_spec
from hicache_ref.sim.run.replay_figures import ComputeTally, count_request, figures, run_config
from hicache_ref.sim.trace.reader import BLOCK_TOKENS, TraceRequest, read_trace, trace_tokens
from hicache_ref.sim.trace.stack_distance import stack_profile
from hicache_ref.sim.trace.stats import FITS_IN_L1
from hicache_ref.spec import CacheSpec

try:
    from importlib.resources.abc import Traversable
except ImportError:  # Python 3.10 keeps it in importlib.abc
    from importlib.abc import Traversable

JSON_KEYS = ("requests", "input_tokens", "l1_hit_tokens", "l2_hit_tokens", "hit_rate", "d2h_tokens", "h2d_tokens",
             "d2h_bytes", "h2d_bytes", "d2h_segments", "h2d_segments", "modeled_transfer_seconds", "wall_seconds",
             "l3_hit_tokens", "l3_errors", "l3_bytes_read", "l3_bytes_written")


def replay(spec: CacheSpec, trace: str | Path | Traversable | list[TraceRequest], limit: int | None = None,
           off: dict | bool | None = None) -> dict:
    """Replay the first `limit` requests of `trace` (a JSONL path, a packaged trace from
    find_trace, or a list of read requests; all when None)
    on the cache `spec` describes, and return the figures (JSON_KEYS and more).
    `off`: HiCache off's figures to price against (hicache_ref.sim.run.baseline); None: replayed here
    after the run; False: not priced (the caller prices against the off run it shares)."""
    if not isinstance(spec, CacheSpec):
        raise ValueError(f"spec: expected a CacheSpec, got {type(spec).__name__}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit: expected a non-negative integer, got {limit!r}")
    ps = spec.page_size
    t_read = time.perf_counter()
    requests = list(trace)[:limit] if isinstance(trace, (list, tuple)) else read_trace(trace, limit)
    read_seconds = time.perf_counter() - t_read
    whole = sum(-(-r.input_length // ps) * ps for r in requests)
    l1, l2 = spec.capacities(whole)  # checked before a backend or pool exists
    backend, own_backend = spec.open_backend()
    totals = dict(requests=0, input_tokens=0, l1_hit_tokens=0, l2_hit_tokens=0, l2_unloaded_tokens=0,
                  truncated_requests=0, kv_mismatch_tokens=0, l3_hit_tokens=0)
    tally = ComputeTally(compute_of(getattr(backend, "profile", None)))
    t0 = time.perf_counter()
    # A full collection would walk every object made before the replay. Trace pages are runs of
    # consecutive ids: spelled by their first id, the tree is the same and a request's token array
    # is never built (hicache_ref.core.page_keys).
    with frozen_heap(), built_cache(spec, backend, own_backend, whole,
                                    page_keys="runs" if BLOCK_TOKENS % ps == 0 else "tokens") as cache:
        with cost.clock_in_replay_state(backend, cache):
            for tokens in trace_tokens(requests, ps):
                res = cache.request(tokens)
                count_request(totals, res)
                totals["kv_mismatch_tokens"] += res.kv_mismatch_tokens
                totals["l3_hit_tokens"] += res.l3_hit_tokens
                tally.add(res)
            cache.close()  # its last transfers are priced in the same state
    wall = time.perf_counter() - t0
    fig = figures(totals, cache, wall, read_seconds, tally, cache.tree.ghost, run_config(spec, backend, l1, l2))
    fig.update(_l3_figures(cache, spec))
    fig["registered_bytes"] = cache.host.nbytes if cache.host is not None else 0
    profile = getattr(backend, "profile", None)
    base = off_figures(spec, requests, fig, off, profile, replay)
    fig.update(cost.replay_figures(profile, fig, base), fits_in_l1=fits_in_l1(fig, base, requests, ps))
    return fig


def fits_in_l1(fig: dict, off: dict | None, requests: list, page_size: int) -> bool | None:
    """Whether the trace fits in L1 (hicache_ref.sim.trace.stats.FITS_IN_L1): HiCache off already
    hits every page an unlimited cache would (one LRU pass over the trace), so L2 and L3 cannot add
    a hit. None without an off run to tell; False as soon as L2 or L3 served a hit."""
    if off is None or not fig["requests"]:
        return None
    if fig["l2_hit_tokens"] or fig.get("l3_hit_tokens"):
        return False
    unlimited = int(stack_profile(requests, page_size).seen_pages.sum()) * page_size
    return off["l1_hit_tokens"] >= unlimited


def off_figures(spec: CacheSpec, requests: list, fig: dict, off, profile, run) -> dict | None:
    """The HiCache-off figures `fig` is priced against: `off` when given, None when False, `fig`
    itself when it is off already or cannot be priced anyway, else `run` (the replay that made
    `fig`: serial or served) of hicache_ref.sim.run.baseline.off_spec over the same requests."""
    if off is False:
        return None
    if off is not None:
        return off
    if is_off(spec) or not fig["requests"] or compute_of(profile) is None:  # nothing to price against
        return fig
    return run(off_spec(spec), requests, off=False)


@contextmanager
def built_cache(spec: CacheSpec, backend, own_backend: bool, whole: int, **build_kw):
    """The cache `spec` builds on `backend` for a replay of `whole` tokens; however the body ends,
    the cache is closed, then the backend where the replay opened it (`own_backend`)."""
    try:
        cache = spec.build(backend, whole, inline=inline_transfers(spec, backend), **build_kw)
        try:
            yield cache
        finally:
            cache.close()
    finally:
        if own_backend:
            backend.close()


def inline_transfers(spec: CacheSpec, backend) -> bool:
    """Whether a replay's transfers run on its own thread (HiCache's `inline`): a materialized
    replay waits for every transfer before the next request, so where the backend's work is
    synchronous CPU work anyway (emu) the controller's threads would add only hand-offs, ~2 ms
    a request. A priced replay keeps them: its submitter batches jobs while the scheduler runs on."""
    return spec.tiers.materialize and spec.sync and backend.runs_inline


@contextmanager
def frozen_heap():
    """Objects that exist before a replay (torch's modules, the trace) are left out of garbage
    collection while it runs (gc.freeze), as SGLang's scheduler does once started: on the
    conversation trace a single full collection walked them for 0.15 s, a fifth of the replay.
    Objects the replay makes are collected as usual. Does nothing when the caller has frozen
    objects itself or turned collection off, so their setting is never undone."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _l3_figures(cache: HiCache, spec: CacheSpec) -> dict:
    """L3 figures (hicache_ref.l3.tier): zeros without an L3; the tier's detail with one."""
    if cache.l3 is None:
        return dict(l3=None, l3_errors=0, l3_bytes_read=0, l3_bytes_written=0)
    return dict(l3=spec.storage.l3, **cache.l3.figures())


def summary_lines(fig: dict) -> list[str]:
    """A human summary of `replay`'s figures."""
    gib = 2**30
    m = fig.get("modeled_transfer_seconds")
    cap = lambda k: "unlimited" if fig.get(f"{k}_unlimited") else f"{fig[f'{k}_tokens']:,}"  # noqa: E731
    return [
        answer_line(fig),
        f"requests {fig['requests']:,}, input tokens {fig['input_tokens']:,} (page {fig['page_size']}, "
        f"L1 {cap('l1')}, L2 {cap('l2')}, {fig['write_policy']}, {fig['host_layout']}, free list {fig['free_list']})",
        f"hit rate {fig['hit_rate']:.4f}: L1 {fig['l1_hit_tokens']:,} + L2 {fig['l2_hit_tokens']:,}"
        + (f" + L3 {fig['l3_hit_tokens']:,}" if fig.get("l3") else "") + " tokens"
        + (f" ({fig['l2_unloaded_tokens']:,} L2 tokens recomputed: no L1 room)" if fig["l2_unloaded_tokens"] else ""),
        f"D2H {fig['d2h_tokens']:,} tokens, {fig['d2h_bytes'] / gib:.2f} GiB, {fig['d2h_segments']:,} segments; "
        f"H2D {fig['h2d_tokens']:,} tokens, {fig['h2d_bytes'] / gib:.2f} GiB, {fig['h2d_segments']:,} segments",
        f"modeled transfer time {'not modeled by this profile' if m is None else f'{m:.3f} s'} "
        f"(profile {fig['profile']}); wall {fig['wall_seconds']:.2f} s, "
        f"{(fig['tokens_per_second'] or 0) / 1e6:.1f} M tokens/s",
    ] + _served_lines(fig) + _l3_lines(fig) + _net_benefit_lines(fig) \
        + ([f"KV mismatches: {fig['kv_mismatch_tokens']:,} tokens"] if fig["materialize"] else []) + _semantics_lines(fig)


def answer_line(fig: dict) -> str:
    """The first line: gain, loss or undecided against L1 alone, the TTFT change with its interval."""
    if fig.get("answer") is None:
        return f"answer: not modeled ({fig.get('net_benefit_reason') or 'no profile'})"
    return spread.phrase(fig, "L1 alone, every host fix on")


def _served_lines(fig: dict) -> list[str]:
    """What a served replay (hicache_ref.sim.run.served_replay, --concurrency) scheduled."""
    if "concurrency" not in fig:
        return []
    release = "prefill releases each request after its transfer (--pd-disagg)" if fig.get("pd") else \
        f"each request holds its KV through its decode steps ({fig['step_seconds'] * 1e3:g} ms a step)"
    arrivals = "at the trace's arrival times" if fig.get("timestamps") else "as fast as slots free up"
    return [f"served: up to {fig['concurrency']:,} requests in flight (at most {fig['max_in_flight']:,} were), "
            f"admitted {arrivals}, {fig['steps']:,} scheduling steps; {release}"]


def _l3_lines(fig: dict) -> list[str]:
    if not fig.get("l3"):
        return []
    mib = 2**20
    return [f"L3 {fig['l3_storage']} ({fig['l3_prefetch_policy']}): {fig['l3_hit_tokens']:,} hit tokens, read "
            f"{fig['l3_bytes_read'] / mib:.1f} MiB, written {fig['l3_bytes_written'] / mib:.1f} MiB, "
            f"{fig['l3_errors']} errors, {fig['l3_corrupt_pages']} corrupt pages; modeled stall "
            f"{fig['l3_modeled_stall_seconds']:.3f} s (link: {fig['l3_link']['basis']})"
            + (f"; store bound {fig['l3_max_bytes'] / mib:,.1f} MiB" if fig.get("l3_max_bytes") else "")
            + (f"; first store error: {fig['l3_store_last_error']}" if fig.get("l3_store_last_error") else "")]


def _semantics_lines(fig: dict) -> list[str]:
    """The request-path switches, when they are not the reference's defaults (hicache_ref/README.md)."""
    over, pd = fig.get("semantics_overrides", []), fig.get("pd_disagg")
    if fig.get("semantics", "reference") == "reference" and not over and not pd:
        return []
    switches = ", ".join(f"{k} {fig[k]}" for k in ("hit_count", "backup_scope", "evict_size", "load_back_threshold"))
    return [f"semantics {fig['semantics']}: {switches}" + (f" (overriding the preset: {', '.join(over)})" if over else "")
            + ("; each request inserted unfinished, then finished (--pd-disagg)" if pd else "")]


def _net_benefit_lines(fig: dict) -> list[str]:
    """Net benefit: HiCache's gain over HiCache off (hicache_ref.sim.price.cost.replay_figures), and the
    fits-in-L1 word where L1 alone already gets every hit."""
    net = fig.get("net_benefit_seconds")
    if net is None:
        return [f"net benefit: not modeled ({fig.get('net_benefit_reason') or 'no profile'})"] + \
            ([FITS_IN_L1] if fig.get("fits_in_l1") else [])
    svc, assumed = fig["net_benefit_service"], fig.get("net_benefit_assumed_inputs") or []
    change = fig.get("modeled_ttft_change_pct")
    return [f"net benefit against HiCache off (L1 alone) {net:+.3f} s = compute saved {fig['net_benefit_compute_saved_seconds']:.3f} s"
            f" - L2 path {svc['l2_path']:.3f} s - loads {svc['load']:.3f} s - backup hold {svc['hold']:.3f} s - "
            f"interference {svc['interference']:.3f} s" + (f" - L3 {svc['l3']:.3f} s" if svc.get("l3") else "")
            + " (every host fix on)"
            + ("" if change is None else f"; modeled TTFT {change:+.1f}% against L1 alone")
            + (f"; assumed inputs: {', '.join(assumed)}" if assumed else "")] + ([FITS_IN_L1] if fig.get("fits_in_l1") else [])
