"""`hicache replay --engine sglang --concurrency N`: SGLang's own HiCache served step by step.

The steps are the reference's (hicache_ref.sim.run.steps: admission, locks through the step, release
after the decode steps or at once under PD); each step drives upstream's cache as its scheduler
does one batch: the step's ack poll at its start (check_hicache_events), every prefill matched,
loaded back, allocated and inserted with its prefix then held locked, and at the batch's end the
step's loads submitted as one merged job and its backups as another (RequestDriver.end_batch).
"""

from __future__ import annotations

from hicache_ref.sim.run.replay_figures import count_request
from hicache_ref.sim.trace.reader import TraceRequest, request_tokens


class UpstreamSteps:
    """A RequestDriver as hicache_ref.sim.run.steps drives it; a lock is upstream's TreeLock (or None)."""

    def __init__(self, driver, totals: dict, tally, on_request=None):
        self.driver, self.totals, self.tally, self.on_request = driver, totals, tally, on_request

    def settle(self) -> None:
        self.driver.settle()

    def begin_batch(self) -> None:
        pass  # upstream's loads and backups queue in its controller until end_batch

    def prefill(self, index: int, r: TraceRequest):
        res, lock = self.driver.prefill_locked(request_tokens(r.hash_ids, r.input_length))
        count_request(self.totals, res)
        self.tally.add(res)
        if self.on_request is not None:
            self.on_request(index, res)
        return lock

    def end_batch(self, locks: list) -> None:
        self.totals["kv_mismatch_tokens"] += self.driver.end_batch()  # 0 unless materialized

    def release(self, lock) -> None:
        self.driver.release(lock)
