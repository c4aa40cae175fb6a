"""The served replay's scheduling steps, whichever cache runs the prefills.

One loop for both engines (hicache_ref.sim.run.served_replay for the reference, hicache_ref.engines.sglang.served
for SGLang's own cache), so the two schedule the same requests at the same steps. A step: release
what finished, apply completions once, admit and prefill while a slot is free (each prefill's cached
path locked), end the batch (its merged submissions), release at once what holds no decode slot (PD,
or no output), then jump to the next event. The rules: hicache_ref/README.md, "Served replay".
"""

from __future__ import annotations

import heapq
from typing import Protocol

from hicache_ref.sim.trace.reader import TraceRequest


class StepCache(Protocol):
    """What the step loop asks of a cache. A `lock` is whatever `prefill` returns and `release` takes."""

    def settle(self) -> None:
        """A step's start: apply every completion landed so far (its one poll)."""

    def begin_batch(self) -> None:
        """Before a step's first prefill."""

    def prefill(self, index: int, request: TraceRequest):
        """One prefill; its cached path stays locked until `release` gets the returned lock."""

    def end_batch(self, locks: list) -> None:
        """After a step's last prefill (`locks`: this step's, in admission order), before any release."""

    def release(self, lock) -> None:
        """The request no longer holds its KV."""


def arrival_steps(requests: list[TraceRequest], serving) -> list[int]:
    """The step each request arrives at: its timestamp over --step-ms with --timestamps, else 0."""
    if not serving.timestamps:
        return [0] * len(requests)
    start = min((r.timestamp for r in requests), default=0.0)
    return [int((r.timestamp - start) / 1000 / serving.step_seconds) for r in requests]


def run_steps(requests: list[TraceRequest], serving, cache: StepCache, on_step=None) -> tuple[int, int]:
    """Serve `requests` on `cache` as `serving` says (concurrency, timestamps, PD release); returns
    (steps, most requests in flight at once). `on_step(in_flight_locks)` runs after each step that
    admitted a request (the locks of those still decoding)."""
    concurrency, pd = serving.concurrency, serving.pd_disagg
    arrival = arrival_steps(requests, serving)
    step, nxt, max_in_flight = 0, 0, 0
    finishing: list[tuple[int, int, object]] = []  # (step it finishes, admission number, lock)
    while nxt < len(requests) or finishing:
        while finishing and finishing[0][0] <= step:  # release what finished by this step
            cache.release(heapq.heappop(finishing)[2])
        cache.settle()
        locks, handed_off = [], []  # this step's; those that hold no decode slot (pd, or no output)
        cache.begin_batch()
        while nxt < len(requests) and len(finishing) + len(handed_off) < concurrency and arrival[nxt] <= step:
            r = requests[nxt]
            lock = cache.prefill(nxt, r)
            locks.append(lock)
            if not pd and r.output_length > 0:
                heapq.heappush(finishing, (step + r.output_length, nxt, lock))
            else:
                handed_off.append(lock)
            nxt += 1
        cache.end_batch(locks)
        for lock in handed_off:
            cache.release(lock)  # prefilled and handed off (pd), or nothing to decode
        max_in_flight = max(max_in_flight, len(finishing) + len(handed_off))
        if locks and on_step is not None:
            on_step([lk for _, _, lk in finishing])
        # jump to the next event: a finish, or (with a free slot) the next arrival
        events = [finishing[0][0]] if finishing else []
        if nxt < len(requests) and len(finishing) < concurrency:
            events.append(max(arrival[nxt], step + (1 if locks else 0)))
        step = max(step + 1, min(events)) if events else step + 1
    cache.settle()
    return step, max_in_flight
