"""Replay as a server sees it: up to N requests in flight, each holding its KV in L1 until it finishes.

Each scheduling step admits, prefills and locks requests, and releases them after their decode steps.
A step is one batch, as upstream schedules it: one completion pass, one merged load job.
With concurrency 1 the figures equal hicache_ref.sim.replay.replay's.
The rules: hicache_ref/README.md, "Served replay" and "Design notes".
"""

from __future__ import annotations

import heapq
import time
from contextlib import nullcontext

import numpy as np

from hicache_ref.core.allocator import pages_to_slots
from hicache_ref.sim import cost
from hicache_ref.sim.figures import ComputeTally, figures, run_config
from hicache_ref.sim.replay import inline_transfers
from hicache_ref.sim.trace import TraceRequest, request_tokens
from hicache_ref.spec import CacheSpec


def _check_hits(cache, batch) -> int:
    """Materialized: wait for the step's loads, then check every prefill's hit KV bit for bit
    (its pages stayed locked since its prefill, so nothing overwrote them)."""
    cache.settle()
    return sum(cache.kv.mismatches(tokens[: len(pages) * cache.page_size], pages_to_slots(pages, cache.page_size))
               for _, tokens, pages, _ in batch if len(pages))


def replay_served(spec: CacheSpec, requests: list[TraceRequest], on_step=None) -> dict:
    """Replay `requests` as `spec.serving` says (concurrency, timestamps, PD release, decode step;
    see the module docstring); the figures of hicache_ref.sim.replay.replay plus `concurrency`,
    `steps`, `max_in_flight`. `on_step(cache, in_flight_nodes)`, if given, runs after each step's
    prefills (tests)."""
    if not isinstance(spec, CacheSpec):
        raise ValueError(f"spec: expected a CacheSpec, got {type(spec).__name__}")
    serving = spec.serving
    if serving.concurrency is None:
        raise ValueError("--concurrency: a served replay needs serving.concurrency (None is the serial replay)")
    concurrency, timestamps, step_seconds = serving.concurrency, serving.timestamps, serving.step_seconds
    pd = serving.pd_disagg  # a PD prefill node releases each request right after its transfer
    requests = list(requests)
    ps = spec.page_size
    whole = sum(-(-r.input_length // ps) * ps for r in requests)
    l1, l2 = spec.capacities(whole)
    backend, own_backend = spec.open_backend()
    totals = dict(requests=0, input_tokens=0, l1_hit_tokens=0, l2_hit_tokens=0, l2_unloaded_tokens=0,
                  truncated_requests=0, kv_mismatch_tokens=0)
    if spec.storage.l3 is not None:  # the model L3 (hicache_ref.storage.model) serves served replays too
        totals["l3_hit_tokens"] = 0
    tally = ComputeTally(getattr(getattr(backend, "profile", None), "compute", None))
    start = min((r.timestamp for r in requests), default=0.0)
    arrival_step = [int((r.timestamp - start) / 1000 / step_seconds) if timestamps else 0 for r in requests]
    t0 = time.perf_counter()
    step, nxt, max_in_flight = 0, 0, 0
    finishing: list[tuple[int, int, object]] = []  # (step it finishes, admission number, locked node)
    try:
        cache = spec.build(backend, whole, inline=inline_transfers(spec, backend))
        tree, controller = cache.tree, cache.controller
        try:
            while nxt < len(requests) or finishing:
                while finishing and finishing[0][0] <= step:  # release what finished by this step
                    tree.unlock(heapq.heappop(finishing)[2])
                cache.settle()  # the step's one application of completions (what landed so far)
                # (locked node, tokens, hit pages, decodes): the step's batch of prefills
                batch: list[tuple[object, np.ndarray, np.ndarray, bool]] = []
                handed_off = 0  # prefills of this step that hold no decode slot (pd, or no output)
                with controller.merged_loads() if controller is not None else nullcontext():
                    while (nxt < len(requests) and len(finishing) + handed_off < concurrency
                           and arrival_step[nxt] <= step):
                        r = requests[nxt]
                        tokens = request_tokens(r.hash_ids, r.input_length)
                        res = cache.request(tokens, in_step=True)
                        for k in totals:
                            totals[k] += {"requests": 1, "truncated_requests": res.truncated}.get(
                                k, getattr(res, k, 0))
                        tally.add(res)
                        # The batch's prefixes stay locked through the step (upstream locks a
                        # request's prefix from scheduling until it is cached); requests that
                        # decode stay locked until their last decode step.
                        m = tree.match_pages(tokens[: res.cached_tokens])
                        tree.lock(m.last_device_node)
                        decodes = not pd and r.output_length > 0
                        hit_pages = m.device_pages[: (res.l1_hit_tokens + res.l2_hit_tokens) // ps]
                        batch.append((m.last_device_node, tokens, hit_pages, decodes))
                        if decodes:
                            heapq.heappush(finishing, (step + r.output_length, nxt, m.last_device_node))
                        else:
                            handed_off += 1
                        nxt += 1
                if batch and spec.tiers.materialize:
                    totals["kv_mismatch_tokens"] += _check_hits(cache, batch)
                for node, _, _, decodes in batch:
                    if not decodes:
                        tree.unlock(node)  # prefilled and handed off (pd), or nothing to decode
                admitted = bool(batch)
                max_in_flight = max(max_in_flight, len(finishing) + handed_off)
                if admitted and on_step is not None:
                    on_step(cache, [n for _, _, n in finishing])
                # jump to the next event: a finish, or (with a free slot) the next arrival
                events = [finishing[0][0]] if finishing else []
                if nxt < len(requests) and len(finishing) < concurrency:
                    events.append(max(arrival_step[nxt], step + (1 if admitted else 0)))
                step = max(step + 1, min(events)) if events else step + 1
            cache.settle()
        finally:
            cache.close()
    finally:
        if own_backend:
            backend.close()
    fig = figures(totals, cache, time.perf_counter() - t0, 0.0, tally, cache.tree.ghost,
                  run_config(spec, backend, l1, l2))
    fig.update(concurrency=concurrency, timestamps=timestamps, pd=pd, step_seconds=step_seconds, steps=step,
               max_in_flight=max_in_flight, registered_bytes=cache.host.nbytes if cache.host is not None else 0)
    if cache.l3 is not None:
        from hicache_ref.sim.replay import _l3_figures

        fig.update(_l3_figures(cache, spec))
    fig.update(cost.replay_figures(getattr(backend, "profile", None), fig))
    return fig
