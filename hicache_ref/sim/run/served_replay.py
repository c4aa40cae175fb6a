"""Replay as a server sees it: up to N requests in flight, each holding its KV in L1 until it finishes.

Each scheduling step admits, prefills and locks requests, and releases them after their decode steps.
A step is one batch, as upstream schedules it: one completion pass, one merged load job.
The step loop is hicache_ref.sim.run.steps (shared with the sglang engine's served replay).
With concurrency 1 the figures equal hicache_ref.sim.run.serial_replay.replay's.
The rules: hicache_ref/README.md, "Served replay" and "Design notes".
"""

from __future__ import annotations

import time
from contextlib import ExitStack

from hicache_ref.core.allocator import pages_to_slots
from hicache_ref.sim.price import cost
from hicache_ref.sim.price.prefill_model import compute_of
from hicache_ref.sim.run.replay_figures import ComputeTally, figures, run_config
from hicache_ref.sim.run.serial_replay import built_cache, fits_in_l1, off_figures
from hicache_ref.sim.run.steps import run_steps
from hicache_ref.sim.trace.reader import TraceRequest, request_tokens
from hicache_ref.spec import CacheSpec


class _ReferenceSteps:
    """The reference HiCache as hicache_ref.sim.run.steps drives it; a lock is (node, tokens, hit pages)."""

    def __init__(self, cache, totals: dict, tally: ComputeTally, materialize: bool, on_request=None):
        self.cache, self.totals, self.tally, self.on_request = cache, totals, tally, on_request
        self.materialize = materialize
        self._batch: ExitStack | None = None

    def settle(self) -> None:
        self.cache.settle()  # the step's one application of completions (what landed so far)

    def begin_batch(self) -> None:
        self._batch = ExitStack()
        if self.cache.controller is not None:
            self._batch.enter_context(self.cache.controller.merged_loads())

    def prefill(self, index: int, r: TraceRequest):
        cache, ps = self.cache, self.cache.page_size
        tokens = request_tokens(r.hash_ids, r.input_length)
        res = cache.request(tokens, in_step=True)
        for k in self.totals:
            self.totals[k] += {"requests": 1, "truncated_requests": res.truncated}.get(k, getattr(res, k, 0))
        self.tally.add(res)
        if self.on_request is not None:
            self.on_request(index, res)
        # The batch's prefixes stay locked through the step (upstream locks a request's prefix
        # from scheduling until it is cached); requests that decode stay locked until their
        # last decode step.
        m = cache.tree.match_pages(tokens[: res.cached_tokens])
        cache.tree.lock(m.last_device_node)
        return m.last_device_node, tokens, m.device_pages[: (res.l1_hit_tokens + res.l2_hit_tokens) // ps]

    def end_batch(self, locks: list) -> None:
        self._batch.close()  # the step's loads, submitted as one job
        if locks and self.materialize:
            self.totals["kv_mismatch_tokens"] += _check_hits(self.cache, locks)

    def release(self, lock) -> None:
        self.cache.tree.unlock(lock[0])


def _check_hits(cache, batch) -> int:
    """Materialized: wait for the step's loads, then check every prefill's hit KV bit for bit
    (its pages stayed locked since its prefill, so nothing overwrote them)."""
    cache.settle()
    return sum(cache.kv.mismatches(tokens[: len(pages) * cache.page_size], pages_to_slots(pages, cache.page_size))
               for _, tokens, pages in batch if len(pages))


def replay_served(spec: CacheSpec, requests: list[TraceRequest], on_step=None, on_request=None,
                  on_build=None, off: dict | bool | None = None) -> dict:
    """Replay `requests` as `spec.serving` says (concurrency, timestamps, PD release, decode step;
    see the module docstring); the figures of hicache_ref.sim.run.serial_replay.replay plus `concurrency`,
    `steps`, `max_in_flight`. `on_step(cache, in_flight_nodes)`, if given, runs after each step's
    prefills; `on_request(index, result)` after each prefill, `on_build(cache)` once the cache is
    built, before the first step (tests, the differential suite). `off`: as replay's (HiCache off,
    replayed served here when None)."""
    if not isinstance(spec, CacheSpec):
        raise ValueError(f"spec: expected a CacheSpec, got {type(spec).__name__}")
    serving = spec.serving
    if serving.concurrency is None:
        raise ValueError("--concurrency: a served replay needs serving.concurrency (None is the serial replay)")
    requests = list(requests)
    ps = spec.page_size
    whole = sum(-(-r.input_length // ps) * ps for r in requests)
    l1, l2 = spec.capacities(whole)
    backend, own_backend = spec.open_backend()
    totals = dict(requests=0, input_tokens=0, l1_hit_tokens=0, l2_hit_tokens=0, l2_unloaded_tokens=0,
                  truncated_requests=0, kv_mismatch_tokens=0)
    if spec.storage.l3 is not None:  # the model L3 (hicache_ref.storage.model) serves served replays too
        totals["l3_hit_tokens"] = 0
    tally = ComputeTally(compute_of(getattr(backend, "profile", None)))
    t0 = time.perf_counter()
    with built_cache(spec, backend, own_backend, whole) as cache:
        if on_build is not None:
            on_build(cache)
        steps = _ReferenceSteps(cache, totals, tally, spec.tiers.materialize, on_request)
        each_step = None if on_step is None else (lambda locks: on_step(cache, [lk[0] for lk in locks]))
        with cost.clock_in_replay_state(backend, cache):
            step, max_in_flight = run_steps(requests, serving, steps, each_step)
            cache.close()  # its last transfers are priced in the same state
    fig = figures(totals, cache, time.perf_counter() - t0, 0.0, tally, cache.tree.ghost,
                  run_config(spec, backend, l1, l2))
    fig.update(served_figures(serving, step, max_in_flight),
               registered_bytes=cache.host.nbytes if cache.host is not None else 0)
    if cache.l3 is not None:
        from hicache_ref.sim.run.serial_replay import _l3_figures

        fig.update(_l3_figures(cache, spec))
    profile = getattr(backend, "profile", None)
    base = off_figures(spec, requests, fig, off, profile, replay_served)
    fig.update(cost.replay_figures(profile, fig, base), fits_in_l1=fits_in_l1(fig, base, requests, ps))
    return fig


def served_figures(serving, steps: int, max_in_flight: int) -> dict:
    """The keys a served replay adds to the replay's figures (either engine)."""
    return dict(concurrency=serving.concurrency, timestamps=serving.timestamps, pd=serving.pd_disagg,
                step_seconds=serving.step_seconds, steps=steps, max_in_flight=max_in_flight)
