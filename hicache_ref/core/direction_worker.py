"""One direction of the cache controller: a submitter thread and a watcher thread on one stream.

The submitter runs queued jobs through the pool mover on the direction's own stream; the watcher
waits on their events in order and turns completions into acks for the scheduler thread. A worker
gets the controller's shared state, not the controller.
`InlineDirectionWorker` does the same on the scheduler thread, on an inline stream, with no thread.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import NamedTuple

import numpy as np

from hal.transfer import kvcacheio
from hal.transfer.direction import Direction
from hicache_ref.core.controller_state import ControllerState, TransferCancelled
from hicache_ref.core.handles import Ack, DirectionStats, TransferHandle
from hicache_ref.core.pool_mover import PoolMover

STOP = object()  # queue sentinel: submit what is queued before it, then end
_CANCELLED = object()
_WAIT_SLICE_S = 0.1  # how often a watcher blocked on an event checks for cancellation
_BATCH_MAX = 256  # priced jobs submitted as one plan at most
_BATCH_WINDOW_S = 0.02  # priced jobs wait this long for company unless someone waits on them


class Job(NamedTuple):
    handle: TransferHandle
    host_indices: np.ndarray | None  # token slots; None for a page job (pool_mover.job_slots makes them)
    device_indices: np.ndarray | None
    pages: tuple[np.ndarray, np.ndarray] | None = None  # (host, device) page numbers, when queued by page


class ExactSeconds:
    """A sum of modeled seconds rounded once, at the end: the same bits whatever the order or
    grouping of the terms (a float running sum rounds at every step, so it would not be).

    Every finite float is an integer multiple of 2**-1074; terms are kept as that integer.
    """

    _SCALE_BITS = 1074

    def __init__(self) -> None:
        self._units = 0
        self.known = True  # False once a term was None (not modeled): the sum is unknown

    def add(self, seconds: float | None) -> None:
        if seconds is None:
            self.known = False
            return
        num, den = float(seconds).as_integer_ratio()
        self._units += num << (self._SCALE_BITS - (den.bit_length() - 1))

    def value(self) -> float | None:
        return self._units / (1 << self._SCALE_BITS) if self.known else None  # int / int rounds once


class DirectionWorker:
    """Submitter + watcher threads of one direction, on one backend stream."""

    on_scheduler_thread = False  # jobs run on this worker's own threads

    def __init__(self, direction: Direction, state: ControllerState, mover: PoolMover, backend):
        self.direction, self.state, self.mover, self.backend = direction, state, mover, backend
        self.stream = self._new_stream()
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.inflight: queue.SimpleQueue = queue.SimpleQueue()  # ([handles], last event), stream order
        self.stats = DirectionStats()
        self._modeled = ExactSeconds()  # acknowledged jobs' modeled seconds (guarded by state.lock)
        self.pending = 0  # enqueued and not yet acked (guarded by state.lock)
        self._start()

    def _new_stream(self):
        return self.backend.new_stream()

    def _start(self) -> None:
        self.submitter = threading.Thread(target=self._submit_loop, name=f"hicache-{self.direction}", daemon=True)
        self.watcher = threading.Thread(target=self._watch_loop, name=f"hicache-{self.direction}-acks", daemon=True)
        self.submitter.start()
        self.watcher.start()

    # -- the controller's side (scheduler thread) -----------------------------------------
    def put(self, job: Job) -> None:
        """Queue `job` (counted in `pending` by the caller) for the submitter."""
        self.jobs.put(job)

    def stop(self) -> None:
        """Submit what is queued, then end the threads (see threads())."""
        self.jobs.put(STOP)

    def threads(self) -> tuple[threading.Thread, ...]:
        """The threads that end after stop()."""
        return self.submitter, self.watcher

    # -- submitter thread -----------------------------------------------------------------
    def _submit_loop(self) -> None:
        with kvcacheio.use(self.backend, self.stream):
            while True:
                batch, stop = self._take_batch()
                for jobs in [batch] if self.mover.priced else [[job] for job in batch]:
                    if jobs and (item := self._submit(jobs)) is not None:
                        self.inflight.put(item)
                if stop:
                    self.inflight.put(STOP)
                    return

    def _take_batch(self) -> tuple[list[Job], bool]:
        """The next job and, when jobs are only priced, every job queued behind it (up to _BATCH_MAX).

        Priced jobs are submitted together as one plan: the link model is linear in
        launches, segments and bytes, so the modeled total is the same, and one stream
        submission per batch instead of per job saves thread hand-offs (GIL round trips
        that cost more than the modeling itself). Nothing waits on a priced transfer's
        bytes, so the submitter also waits up to _BATCH_WINDOW_S for a batch to build.
        """
        jobs, stop = [self.jobs.get()], False
        if self.mover.priced:
            if jobs[0] is not STOP:
                # Let more jobs arrive before taking the GIL from the scheduler thread again,
                # unless someone waits for completions (flush, a handle, shutdown).
                self.state.hurry.wait(_BATCH_WINDOW_S)
            while len(jobs) < _BATCH_MAX:
                try:
                    jobs.append(self.jobs.get_nowait())
                except queue.Empty:
                    break
        if STOP in jobs:
            jobs, stop = jobs[: jobs.index(STOP)], True
        return self._live(jobs), stop

    def _live(self, jobs: list[Job]) -> list[Job]:
        """`jobs` less those failed here because the controller was cancelled or has failed."""
        live = []
        for job in jobs:
            if self.state.cancelled.is_set():
                job.handle._fail(TransferCancelled(f"{self.direction} transfer {job.handle.tag!r}: cancelled"))
            elif self.state.error is not None:  # fail-stop: nothing more runs after a failure
                job.handle._fail(self.state.error)
            else:
                live.append(job)
                continue
            with self.state.lock:
                self.pending -= 1
        return live

    def _submit(self, jobs: list[Job]) -> tuple[list[TransferHandle], object] | None:
        """Run `jobs` on the current kvcacheio stream; returns (their handles, the last event) for
        _finish, or None when the submission failed (the handles failed, the controller fail-stops)."""
        try:
            t0 = time.perf_counter()
            totals = self.mover.job_totals(self.direction, jobs)
            events = self.mover.run(self.direction, jobs, totals)
            for job, layer0 in zip(jobs, totals, strict=True):
                job.handle.modeled_cost = self.mover.job_seconds(self.direction, layer0, job.handle.num_tokens)
                self._count(job, layer0, (time.perf_counter() - t0) / len(jobs))
        except BaseException as e:  # noqa: BLE001 - carried to the scheduler thread
            for job in jobs:
                job.handle._fail(e)
                self._record_error(job.handle, e)
            if self.on_scheduler_thread and not isinstance(e, Exception):
                raise  # Ctrl-C (or exit) on the scheduler thread ends the run, not just this transfer
            return None
        for job in jobs:
            job.handle._add_events(events)
        return [job.handle for job in jobs], events[-1]

    def _count(self, job: Job, layer0: tuple[int, int], submit_seconds: float) -> None:
        # Every layer repeats layer 0's runs (hal.transfer.plan merges once and shifts per layer).
        layers = self.mover.layers
        nbytes, segments = layer0[0] * layers, layer0[1] * layers
        with self.state.lock:
            s = self.stats
            s.submit_seconds += submit_seconds
            s.transfers += 1
            s.tokens += job.handle.num_tokens
            s.bytes += nbytes
            s.segments += segments
            s.launches += 1 if self.direction == Direction.D2H else layers

    # -- watcher thread --------------------------------------------------------------------
    def _watch_loop(self) -> None:
        while True:
            item = self.inflight.get()
            if item is STOP or not self._finish(*item):
                return

    def _finish(self, handles: list[TransferHandle], ev) -> bool:
        """Wait for `ev`, then acknowledge `handles` or fail them; False when cancelled first."""
        error = self._await(ev)
        if error is _CANCELLED:
            return False
        if error is not None:
            for h in handles:
                h._fail(error)
                self._record_error(h, error)
        else:
            self._acknowledge(handles, getattr(ev, "modeled_time", None))
        return True

    def _await(self, ev):
        """None once `ev` completed well, its failure, or _CANCELLED. Waits in slices so that a
        cancelled controller is not held by an event that never completes."""
        while True:
            try:
                ev.wait(_WAIT_SLICE_S)
            except TimeoutError:
                pass
            except BaseException as e:  # noqa: BLE001 - the stream reported a failed transfer
                return e
            if ev.query():
                try:
                    ev.wait(0)  # a failure that landed after the slice ended shows here
                except BaseException as e:  # noqa: BLE001
                    return e
                return None
            if self.state.cancelled.is_set():
                return _CANCELLED

    def _acknowledge(self, handles: list[TransferHandle], modeled_time: float | None) -> None:
        with self.state.lock:
            # The direction's modeled seconds add each job's own price (not the stream clock,
            # whose readings depend on how timing batched the jobs): reproducible to the bit.
            for h in handles:
                self._modeled.add(h.modeled_cost)
            self.stats.modeled_seconds = self._modeled.value()
            for h in handles:
                for m in h.acked():  # a merged load acknowledges each load it stands for
                    self.state.acks.append(Ack(self.direction, m.tag, m.num_tokens, modeled_time))
            self.state.last_completion = time.perf_counter()
            self.pending -= len(handles)
            self.state.lock.notify_all()

    def _record_error(self, handle: TransferHandle, error: BaseException) -> None:
        """`handle` failed: the controller fail-stops, and the transfer is no longer pending."""
        self.state.note_error(handle, error)
        with self.state.lock:
            self.pending -= 1
            self.state.lock.notify_all()


class InlineDirectionWorker(DirectionWorker):
    """A direction whose jobs run on the scheduler thread as they are queued, on an inline stream
    (backend.inline_stream), with no thread: where the backend's work is synchronous CPU work
    anyway (emu, count) and the caller waits for every transfer (a sync replay), the submitter
    and watcher threads add only hand-offs. Counters, acks, failures and fail-stop are the
    threaded worker's own code; what changes is that put() returns after the transfer ran."""

    on_scheduler_thread = True

    def _new_stream(self):
        return self.backend.inline_stream()

    def _start(self) -> None:
        return None

    def put(self, job: Job) -> None:
        live = self._live([job])
        if not live:
            return
        with kvcacheio.use(self.backend, self.stream):
            item = self._submit(live)
        if item is not None:
            self._finish(*item)

    def stop(self) -> None:
        return None

    def threads(self) -> tuple[threading.Thread, ...]:
        return ()
