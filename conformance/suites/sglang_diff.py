"""Request-by-request figures of one trace slice on both engines, for the differential suite.

A row per request: L1 and L2 hit tokens, host-cached tokens not loaded, tokens backed up (D2H)
and loaded back (H2D), and tokens evicted from L1 (device) and from L2 (host) while the request
ran. The reference runs with the preset named by REFERENCE_PRESET (the one that claims SGLang's
release), the sglang engine runs SGLang itself. Evictions are read on both sides from what each
cache's eviction calls return (EvictionCount here, the engine's EvictionTally upstream).
"""

from __future__ import annotations

from typing import NamedTuple

from hicache_ref.engines.sglang.pin import SEMANTICS_PRESET
from hicache_ref.sim.trace.reader import BLOCK_TOKENS, find_trace, read_trace, trace_tokens
from hicache_ref.spec import CacheSpec

# The preset that models the pinned SGLang release.
REFERENCE_PRESET = SEMANTICS_PRESET
TRACES = ("conversation_trace.jsonl", "synthetic_trace.jsonl")
# Small KV rows (1 layer of a 128-wide latent: SGLang's MLA pool keeps a 64-wide rope part)
# keep the copies cheap; hit and transfer tokens do not depend on the row width.
GEOMETRY = dict(layers=1, kv_dim=128)
# MHA rows: SGLang's MHA device and host pools (K and V per layer, two heads), in each host layout.
MHA_GEOMETRY = dict(attention="mha", layers=1, heads=2, kv_dim=32)
# An L3 case's switches: a file store in DIR (upstream's HiCacheFile on the sglang engine, the
# harness's file store in upstream's objects on the reference), prefetches waited for in full (the
# only policy whose outcome upstream's threads cannot change), real bytes on the reference.
L3_PAGES = ("l3_pages_read", "l3_pages_written")  # pages moved from and to the store over the run


def l3_switches(directory) -> dict:
    return dict(l3=f"file:{directory}", prefetch_policy="wait_complete", materialize=True)


class Row(NamedTuple):
    l1_hit: int
    l2_hit: int
    l2_unloaded: int
    backed_up: int
    loaded_back: int
    evicted: int  # L1 tokens freed by eviction
    host_evicted: int  # L2 tokens freed by eviction
    l3_hit: int = 0  # prefix tokens read from L3 and loaded (0 without an L3)


class EvictionCount:
    """Tokens the reference tree's L1 and L2 evictions free, from their results (TierMoves.evict,
    evict_host, wrapped on the instance: every take_pages looks them up there)."""

    def __init__(self, tiers):
        self.device_tokens = self.host_tokens = 0
        evict, evict_host = tiers.evict, tiers.evict_host

        def counted_evict(*args, **kwargs):
            result = evict(*args, **kwargs)
            self.device_tokens += result.evicted_tokens
            return result

        def counted_evict_host(*args, **kwargs):
            result = evict_host(*args, **kwargs)
            self.host_tokens += result.evicted_tokens
            return result

        tiers.evict, tiers.evict_host = counted_evict, counted_evict_host


def slice_of(trace: str, limit: int):
    """The first `limit` requests of packaged trace `trace`, replayed twice: the traces reuse
    little within a short window, so the second pass is where evicted prefixes come back
    (L2 hits and loads) and where each tier's capacity decides."""
    first = read_trace(find_trace(trace), limit)
    return first + first


def capacities(requests, page_size: int, tight: bool) -> tuple[int, int]:
    """(L1, L2) tokens for the slice (a pass is half of it): tight 1/8 and 3/4 of a pass's
    tokens (both tiers evict), loose 1/2 and twice a pass (the second pass loads from L2); pages."""
    whole = sum(-(-r.input_length // page_size) * page_size for r in requests[: len(requests) // 2])
    l1, l2 = (whole // 8, whole * 3 // 4) if tight else (whole // 2, 2 * whole)
    return max(page_size, l1 // page_size * page_size), max(2 * page_size, l2 // page_size * page_size)


def spec_for(requests, page_size: int, policy: str, tight: bool, pd: bool, **switches) -> CacheSpec:
    """The case's spec: the preset at the slice's capacities; `switches` (geometry, host layout, io
    backend) replace the defaults (GEOMETRY, the preset's layout and io backend)."""
    l1, l2 = capacities(requests, page_size, tight)
    return CacheSpec.preset(REFERENCE_PRESET, page_size=page_size, write_policy=policy, l1_tokens=l1,
                            l2_tokens=l2, pd_disagg=pd, **{**GEOMETRY, **switches})


def reference_rows(spec: CacheSpec, requests, l3_pages: dict | None = None) -> list[Row]:
    """The reference engine, one request at a time (the loop hicache_ref.sim.run.serial_replay runs). With an
    L3, `l3_pages` (when given) gets the pages read from and written to the store (L3_PAGES)."""
    ps = spec.page_size
    whole = sum(-(-r.input_length // ps) * ps for r in requests)
    backend, own = spec.open_backend()
    rows, d2h0, h2d0 = [], 0, 0
    try:
        cache = spec.build(backend, whole, page_keys="runs" if BLOCK_TOKENS % ps == 0 else "tokens")
        ev = EvictionCount(cache.tree.tiers)
        try:
            for tokens in trace_tokens(requests, ps):
                ev0 = ev.device_tokens, ev.host_tokens
                res = cache.request(tokens)
                # Counted at completion: settle now what the next request's start would (the same
                # state), so a request's backups count in its own row, as the sglang engine's do.
                cache.settle()
                st = cache.controller.stats()
                rows.append(Row(res.l1_hit_tokens, res.l2_hit_tokens, res.l2_unloaded_tokens,
                                st.d2h.tokens - d2h0, st.h2d.tokens - h2d0,
                                ev.device_tokens - ev0[0], ev.host_tokens - ev0[1], res.l3_hit_tokens))
                d2h0, h2d0 = st.d2h.tokens, st.h2d.tokens
        finally:
            cache.close()  # applies the L3 writes still queued
        if l3_pages is not None and cache.l3 is not None:
            l3_pages.update({k: cache.l3.counters[k] for k in L3_PAGES})
    finally:
        if own:
            backend.close()
    return rows


def sglang_rows(spec: CacheSpec, requests, l3_pages: dict | None = None, figures: dict | None = None) -> list[Row]:
    """The sglang engine, one row per request from its per-request callback (`l3_pages`: as
    reference_rows, from its figures; `figures`, when given, gets all of them)."""
    from hicache_ref.engines.sglang.engine_replay import replay_sglang

    token_bytes = spec.geometry.token_bytes
    rows, last = [], [0, 0]

    def on_request(i, res, tallies):
        d2h, h2d = tallies["d2h"].bytes // token_bytes, tallies["h2d"].bytes // token_bytes
        rows.append(Row(res.l1_hit_tokens, res.l2_hit_tokens, res.l2_unloaded_tokens, d2h - last[0], h2d - last[1],
                        res.evicted_tokens, res.host_evicted_tokens, res.l3_hit_tokens))
        last[:] = d2h, h2d

    fig = replay_sglang(spec, list(requests), on_request=on_request)
    if l3_pages is not None and fig.get("l3"):
        l3_pages.update({k: fig[k] for k in L3_PAGES})
    if figures is not None:
        figures.update(fig)
    return rows


def diff_summary(ref: list, up: list, most: int = 4) -> str:
    """Where the two engines part, request by request: the first few differing rows and totals."""
    bad = [(i, r, u) for i, (r, u) in enumerate(zip(ref, up, strict=False)) if r != u]
    if not bad and len(ref) == len(up):
        return ""
    fields = type(ref[0] if ref else up[0])._fields
    parts = []
    for i, r, u in bad[:most]:
        parts.append(f"req {i}: " + ", ".join(f"{f} ref {a} sglang {b}" for f, a, b in zip(fields, r, u, strict=True) if a != b))
    tot = ", ".join(f"{f} {sum(getattr(x, f) for x in ref)}/{sum(getattr(x, f) for x in up)}" for f in fields)
    return f"{len(bad)} of {len(ref)} requests differ; " + "; ".join(parts) + f"; totals ref/sglang: {tot}"


# -- served replay (--concurrency): the same steps on both engines ------------------------------------

class ServedRow(NamedTuple):
    """A served request's row: its hits and the evictions its own prefill made. Its transfers are
    not its own here (a step's loads and backups go out as one submission), so they are compared
    as the replay's totals (SERVED_FIGURES)."""
    l1_hit: int
    l2_hit: int
    l2_unloaded: int
    evicted: int
    host_evicted: int


# The served figures both engines must give alike: the schedule, the hits, the tokens and bytes moved.
# Not compared: segments (slot placement differs already in the serial replay: the serial suite
# compares none either) and transfers/launches (upstream submits a step's backups as one merged
# job, the reference one job per backup; hicache_ref/README.md, "Differences without a switch").
SERVED_FIGURES = ("requests", "input_tokens", "l1_hit_tokens", "l2_hit_tokens", "l2_unloaded_tokens",
                  "truncated_requests", "d2h_tokens", "h2d_tokens", "d2h_bytes", "h2d_bytes", "concurrency", "pd",
                  "steps", "max_in_flight")


def served_spec(requests, page_size: int, policy: str, tight: bool, pd: bool, concurrency: int) -> CacheSpec:
    return spec_for(requests, page_size, policy, tight, pd).replace(concurrency=concurrency)


def reference_served(spec: CacheSpec, requests) -> tuple[list[ServedRow], dict]:
    """The reference's served replay (hicache_ref.sim.run.served_replay): a row per request, and its figures."""
    from hicache_ref.sim.run.served_replay import replay_served

    rows, count, last = [], [], [0, 0]

    def built(cache):
        count.append(EvictionCount(cache.tree.tiers))

    def seen(i, res):
        ev = count[0]
        rows.append(ServedRow(res.l1_hit_tokens, res.l2_hit_tokens, res.l2_unloaded_tokens,
                              ev.device_tokens - last[0], ev.host_tokens - last[1]))
        last[:] = ev.device_tokens, ev.host_tokens

    return rows, replay_served(spec, list(requests), on_request=seen, on_build=built)


def sglang_served(spec: CacheSpec, requests) -> tuple[list[ServedRow], dict]:
    """The sglang engine's served replay: a row per request, and its figures."""
    from hicache_ref.engines.sglang.engine_replay import replay_sglang

    rows = []

    def seen(i, res, tallies):
        rows.append(ServedRow(res.l1_hit_tokens, res.l2_hit_tokens, res.l2_unloaded_tokens, res.evicted_tokens,
                              res.host_evicted_tokens))

    return rows, replay_sglang(spec, list(requests), on_request=seen)


def figures_diff(ref: dict, up: dict, keys=SERVED_FIGURES) -> str:
    """The compared figures that differ, as `key ref A sglang B` (empty when all agree)."""
    return ", ".join(f"{k} ref {ref.get(k)} sglang {up.get(k)}" for k in keys if ref.get(k) != up.get(k))
