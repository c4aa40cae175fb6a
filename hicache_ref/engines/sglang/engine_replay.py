"""`hicache replay --engine sglang`: the trace through SGLang's own HiCache on the HAL.

Same figures, same keys as the reference engine (hicache_ref.sim.run.serial_replay, and with --concurrency
hicache_ref.sim.run.served_replay's served keys: steps from the same loop, hicache_ref.sim.run.steps): the totals come
from the request driver, the transfer counters from every copy upstream made (pricing), the
configuration and the cost model from the reference's own figure builders.
"""

from __future__ import annotations

import time

from hal.backend import get_backend
from hal.transfer import kvcacheio as hal_kvcacheio
from hal.transfer.direction import POOL_DIRECTIONS
from hicache_ref.engines.sglang import kernel_shim
from hicache_ref.engines.sglang import l3_objects as storage
from hicache_ref.engines.sglang.copy_pricing import FullGeometryPricer, narrow_spec
from hicache_ref.engines.sglang.host_room import is_pool_failure, quiet_pool_failure, refuse_host_pool
from hicache_ref.engines.sglang.prefetch import l3_figures
from hicache_ref.engines.sglang.stores import open_store
from hicache_ref.engines.sglang.support import ENGINE_NAME, SUPPORT, pools_shortfall, refuse_pools
from hicache_ref.sim.price import cost
from hicache_ref.sim.price.prefill_model import compute_of
from hicache_ref.sim.run.replay_figures import ComputeTally, count_request, figures, run_config
from hicache_ref.sim.run.serial_replay import fits_in_l1
from hicache_ref.sim.run.served_replay import served_figures
from hicache_ref.sim.run.steps import run_steps
from hicache_ref.sim.trace.reader import read_trace, trace_tokens
from hicache_ref.spec.engine_support import first_refusal


class _Stats:
    """The reference controller's stats() shape, from the HAL tallies."""

    def __init__(self, tallies, token_bytes: int):
        for d in POOL_DIRECTIONS:
            t = tallies[d]
            t.tokens = t.bytes // token_bytes
            t.max_enqueue_seconds = 0.0
            setattr(self, str(d), t)
        self.modeled_seconds = sum(tallies[d].modeled_seconds for d in POOL_DIRECTIONS)


class _Figured:
    """What figures() reads of a cache: its controller's stats."""

    def __init__(self, stats):
        self.controller = self
        self._stats = stats

    def stats(self):
        return self._stats


def refuse_unsupported(spec) -> None:
    """ValueError naming the first option the engine does not run (before anything is built):
    its declaration of every spec field (hicache_ref.engines.sglang.support)."""
    why = first_refusal(ENGINE_NAME, SUPPORT, spec)
    if why is not None:
        raise ValueError(why)


def rows_for(spec, l1: int, l2: int, rows: str):
    """The spec upstream runs on: `spec` itself, or (rows "narrow", or "auto" where the spec's pools
    do not fit) its narrow rows, every copy priced at the spec's geometry (pricing); refused where
    even those do not fit."""
    if rows not in ("auto", "full", "narrow"):
        raise ValueError(f"rows: {rows!r} is not auto, full or narrow")
    narrow = rows == "narrow" or (rows == "auto" and pools_shortfall(spec, l1, l2) is not None)
    run = narrow_spec(spec) if narrow else spec
    refuse_pools(run, l1, l2)
    return run


def built(spec, backend, l1: int, l2: int, store):
    """build's cache; ValueError naming the capacities when its pools cannot be allocated (memory
    taken since the check, a limit the check cannot see: RLIMIT_AS, a full /dev/shm)."""
    from hicache_ref.engines.sglang.build_cache import build

    try:
        with quiet_pool_failure():
            return build(spec, backend, l1, l2, store)
    except Exception as e:
        if not is_pool_failure(e):
            raise
        raise ValueError(f"--l2-tokens: SGLang could not allocate its KV pools (L1 {l1:,} + L2 {l2:,} tokens of "
                         f"{spec.geometry.token_bytes:,}-byte rows): {e}; give smaller --l1-tokens/--l2-tokens, "
                         "or the run more memory") from None


def replay_sglang(spec, trace, limit: int | None = None, on_request=None, rows: str = "auto",
                  off: dict | bool | None = None) -> dict:
    """Replay the first `limit` requests of `trace` through SGLang's cache, serially or served
    (spec.serving.concurrency: hicache_ref.engines.sglang.served); the reference's figures, same keys.
    Under --tp this is one rank of the group (hicache_ref.engines.replay_with adds the group's
    figures): upstream's ranks hold the same tree and, with every copy complete at its step
    (driver: pinned timing), its all-reduce of completed acks (MIN over ranks) is what one rank sees.
    `on_request(index, result, tallies)`, when given, sees every request's result and the running
    per-direction tallies (the differential suite's per-request view). `rows`: see rows_for; on
    narrow rows the figures are the spec's geometry's and `geometry.engine_rows` names the rows run.
    `off`: HiCache off's figures to price against (None: the reference replays it here; False: not priced)."""
    from hicache_ref.engines.sglang.driver import RequestDriver
    from hicache_ref.engines.sglang.served import UpstreamSteps

    refuse_unsupported(spec)
    if spec.storage.l3 is not None:
        spec = storage.with_upstream_order(spec)
    ps, serving = spec.page_size, spec.serving
    t_read = time.perf_counter()
    # arrival times only mean something in time order: timestamps refuse a line going back (as run_replay)
    requests = list(trace)[:limit] if isinstance(trace, (list, tuple)) else \
        read_trace(trace, limit, ordered=serving.concurrency is not None and serving.timestamps)
    read_seconds = time.perf_counter() - t_read
    whole = sum(-(-r.input_length // ps) * ps for r in requests)
    l1, l2 = spec.capacities(whole)
    run_spec = rows_for(spec, l1, l2, rows)
    if run_spec is not spec and spec.storage.l3 is not None:
        raise ValueError(f"--l3: upstream's store keeps the rows upstream runs, and {pools_shortfall(spec, l1, l2)}; "
                         "give smaller --layers/--kv-dim, or drop --l3")
    if l2 <= 0:
        raise ValueError("--l2-tokens: the sglang engine needs an L2 (SGLang's HiCache has one)")
    refuse_host_pool(l2, run_spec.geometry.token_bytes, ps)  # upstream's own rule, before it logs a traceback
    # Upstream's pools are real tensors: its copies move bytes, so the backend is one that does
    # (emu on the spec's profile: the same modeled seconds as the reference's count backend).
    backend, own_backend = (spec.backend, False) if spec.backend is not None else (get_backend("emu", spec.profile), True)
    if not backend.capabilities().moves_bytes:
        raise ValueError(f"--backend: {backend.name} moves no bytes; SGLang's pools need one that does (emu)")
    narrow = run_spec is not spec
    # every copy upstream makes is counted and priced at the spec's rows (pricing)
    pricer = kernel_shim.PRICER = FullGeometryPricer(spec.geometry.kv(), l2, backend, run_spec.geometry.layers)
    hal_kvcacheio.set_backend(backend)
    totals = dict(requests=0, input_tokens=0, l1_hit_tokens=0, l2_hit_tokens=0, l2_unloaded_tokens=0,
                  truncated_requests=0, kv_mismatch_tokens=0, l3_hit_tokens=0)
    tally = ComputeTally(compute_of(getattr(backend, "profile", None)))
    token_bytes = spec.geometry.token_bytes  # every layer, K and V (MHA, all heads) or the latent (MLA)
    t0 = time.perf_counter()
    up = store = None
    try:
        store = open_store(spec.storage)  # mooncake:auto starts its cluster here
        up = built(run_spec, backend, l1, l2, store)
        host_bytes = sum(e.host_pool.kv_buffer.nbytes for e in up.cache.cache_controller.mem_pool_host.entries)
        # the host pool the spec's rows would register: the same slots, each row as wide as the spec's
        host_bytes = host_bytes // run_spec.geometry.token_bytes * token_bytes
        driver = RequestDriver(up, serving.pd_disagg, l3=store is not None, kv=spec.tiers.materialize)
        seen = None if on_request is None else (lambda i, res: on_request(i, res, pricer.tallies))
        with cost.clock_in_state(backend, host_bytes):  # each copy priced in the replay's host state
            if serving.concurrency is not None:
                served = run_steps(requests, serving, UpstreamSteps(driver, totals, tally, seen))
            else:
                for i, tokens in enumerate(trace_tokens(requests, ps)):
                    res = driver.request(tokens)
                    count_request(totals, res)
                    totals["l3_hit_tokens"] += res.l3_hit_tokens
                    totals["kv_mismatch_tokens"] += res.kv_mismatch_tokens
                    tally.add(res)
                    if seen is not None:
                        seen(i, res)
                driver.settle()
        written = store.written() if store is not None else 0
    finally:
        if up is not None:
            up.close()
        if store is not None:
            store.close()
        kernel_shim.PRICER = None
        hal_kvcacheio.set_backend(None)
        if own_backend:
            backend.close()
    wall = time.perf_counter() - t0
    fig = figures(totals, _Figured(_Stats(pricer.tallies, token_bytes)), wall, read_seconds, tally, None,
                  run_config(spec, backend, l1, l2))
    fig.update(l3_figures(spec, backend, driver.l3, written) if driver.l3 is not None else
               dict(l3=None, l3_errors=0, l3_bytes_read=0, l3_bytes_written=0))
    if narrow:
        fig["geometry"] = dict(fig["geometry"], engine_rows=run_spec.geometry.config())
    fig["registered_bytes"] = host_bytes
    if serving.concurrency is not None:  # the reference's served keys: no L3 keys (a real store is serial only)
        fig.update(served_figures(serving, *served))
        for k in ("l3", "l3_hit_tokens", "l3_errors", "l3_bytes_read", "l3_bytes_written"):
            fig.pop(k, None)
    profile = getattr(backend, "profile", None)
    if off is None and fig["requests"] and compute_of(profile) is not None:
        from hicache_ref.sim.run.replay_dispatch import off_replay

        off = off_replay(spec, requests)  # HiCache off stays the reference's, as in sweep and ablate
    fig.update(cost.replay_figures(profile, fig, off or None),
               fits_in_l1=fits_in_l1(fig, off or None, requests, spec.page_size))
    return fig

