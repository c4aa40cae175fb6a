"""Cache controller: moves KV between the device pool (L1) and the host pool (L2) off the scheduler thread.

A submission can be slow, so the scheduler thread only enqueues and gets a handle at once.
Each direction has its own submitter and watcher thread and its own backend stream.
With `inline` (a backend whose work is synchronous anyway, as emu's CPU copies) each transfer runs
on the calling thread instead, before write()/load() return, and no thread is started.
It mirrors upstream's HiCacheController (managers/cache_controller.py).
Errors make it fail-stop: every later call raises `TransferError`.
Threads, checks, completion order and counters: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

import numpy as np

from hal.transfer.direction import POOL_DIRECTIONS, Direction
from hal.transfer.io_backend import direct_order
from hicache_ref.core.allocator import has_duplicates, slots_to_pages
from hicache_ref.core.controller_state import ControllerState, TransferCancelled, TransferError
from hicache_ref.core.direction_worker import DirectionWorker, InlineDirectionWorker, Job
from hicache_ref.core.handles import (
    Ack,
    ControllerStats,
    DirectionStats,
    LoadHandle,
    MergedLoadHandle,
    TransferHandle,
    WriteHandle,
)
from hicache_ref.core.pool_mover import PoolMover, job_slots

__all__ = ["Ack", "CacheController", "ControllerStats", "DirectionStats", "LoadHandle", "TransferCancelled",
           "TransferError", "TransferHandle", "WriteHandle"]

DIRECTIONS = POOL_DIRECTIONS  # D2H backups, H2D loads: one worker each


class CacheController:
    """Queues D2H backups and H2D loads between `device_pool` and `host_pool` on `backend`
    (both pools with buffers; meta ones on a backend that moves no bytes).

    `inline`: run every transfer on the calling thread as it is queued, on the backend's inline
    streams (only where `backend.runs_inline`). For a caller that waits for each transfer anyway
    (a sync replay) it saves the thread hand-offs; the same decisions, counters and modeled
    seconds. What measures asynchronous submission keeps the threads (the default).
    """

    def __init__(self, device_pool, host_pool, backend, inline: bool = False):
        if device_pool.geom != host_pool.geom:
            raise ValueError("host_pool: geometry differs from device_pool's")
        if inline and not backend.runs_inline:
            raise ValueError(f"inline: backend {backend.name!r} has no inline streams (its transfers are asynchronous)")
        self.device_pool, self.host_pool, self.backend = device_pool, host_pool, backend
        self.geom, self.layout = device_pool.geom, host_pool.layout
        self.io_backend = getattr(host_pool, "io_backend", None)  # the host pool's (hal.transfer.io_backend)
        self.inline = inline
        self._state = ControllerState()
        mover = PoolMover(device_pool, host_pool, backend)
        worker = InlineDirectionWorker if inline else DirectionWorker
        self._dirs = {name: worker(name, self._state, mover, backend) for name in DIRECTIONS}
        self._held: list[Job] | None = None  # loads held by merged_loads (scheduler thread only)

    # -- scheduler thread: enqueue ------------------------------------------------------
    def write(self, device_indices, host_indices, tag: Any = None) -> WriteHandle:
        """Queue a backup host[host_indices] = device[device_indices] (all layers); returns at once."""
        t0 = time.perf_counter()
        di, hi = self._slots(device_indices, host_indices, "host")
        return self._queue(Direction.D2H, di, hi, tag, t0)

    def load(self, host_indices, device_indices, tag: Any = None) -> LoadHandle:
        """Queue a load device[device_indices] = host[host_indices], one submission per layer."""
        t0 = time.perf_counter()
        di, hi = self._slots(device_indices, host_indices, "device")
        return self._queue(Direction.H2D, di, hi, tag, t0)

    def write_pages(self, device_pages, host_pages, tag: Any = None, owned: bool = False) -> WriteHandle:
        """`write` of whole pages (page p = slots [p*page_size, (p+1)*page_size)), as the radix
        tree hands them out: checked per page, so the check costs page_size times less.
        `owned`: int64 page arrays of a TierCopy the tree made over these very pools (HiCache),
        inside both pools and distinct by construction: only the lengths are checked."""
        t0 = time.perf_counter()
        dp, hp = self._owned(device_pages, host_pages) if owned else self._pages(device_pages, host_pages, "host")
        return self._queue_pages(Direction.D2H, dp, hp, tag, t0)

    def load_pages(self, host_pages, device_pages, tag: Any = None, owned: bool = False) -> LoadHandle:
        """`load` of whole pages (see write_pages, also for `owned`)."""
        t0 = time.perf_counter()
        dp, hp = self._owned(device_pages, host_pages) if owned else self._pages(device_pages, host_pages, "device")
        return self._queue_pages(Direction.H2D, dp, hp, tag, t0)

    def _queue(self, direction: Direction, di: np.ndarray, hi: np.ndarray, tag: Any, t0: float) -> TransferHandle:
        h = self._handle(direction, tag, len(hi))
        if self._hold(h):
            self._held.append(Job(h, hi, di))
            return h
        hi, di = direct_order(self.layout, self.io_backend, hi, di)  # direct + layer_first: host-sorted
        self._enqueue(direction, Job(h, hi, di), t0)
        return h

    def _queue_pages(self, direction: Direction, dp: np.ndarray, hp: np.ndarray, tag: Any, t0: float) -> TransferHandle:
        h = self._handle(direction, tag, len(hp) * self.geom.page_size)
        if self._hold(h):
            self._held.append(Job(h, None, None, (hp, dp)))
            return h
        # Sorting whole pages by host page sorts their slots by host index (a page's slots ascend).
        hp, dp = direct_order(self.layout, self.io_backend, hp, dp)
        self._enqueue(direction, Job(h, None, None, (hp, dp)), t0)
        return h

    def _handle(self, direction: Direction, tag: Any, tokens: int) -> TransferHandle:
        if direction == Direction.D2H:
            return WriteHandle(self._state, direction, tag, tokens, 1)
        return LoadHandle(self._state, direction, tag, tokens, self.geom.layers)

    def _hold(self, h: TransferHandle) -> bool:
        """Inside merged_loads a load is held for the step's one submission."""
        if self._held is None or h.direction != Direction.H2D:
            return False
        h._submit_held = self.submit_held
        return True

    # -- scheduler thread: merged loads of one scheduling step --------------------------
    @contextmanager
    def merged_loads(self):
        """Hold the loads queued inside the block and submit them as one job when it ends.

        Upstream merges the loads of one batch into one submission: one launch per layer for
        all of them, and runs that continue from one load into the next merge into one
        segment. A held load's handle works as any other; waiting on it (or `flush`) submits
        what is held so far first. Not reentrant.
        """
        self._check_open()
        if self._held is not None:
            raise RuntimeError("controller: merged_loads is already open")
        self._held = []
        try:
            yield self
        finally:
            try:
                self.submit_held()
            finally:
                self._held = None

    def submit_held(self) -> None:
        """Submit the loads merged_loads holds as one job (in the order queued); no-op when none."""
        if not self._held:
            return
        t0 = time.perf_counter()
        jobs, self._held = self._held, []
        for job in jobs:
            job.handle._submit_held = None
        paged = all(j.pages is not None for j in jobs)  # else slot and page loads were mixed: use slots
        if paged:
            hi = np.concatenate([j.pages[0] for j in jobs])
            di = np.concatenate([j.pages[1] for j in jobs])
        else:
            slots = [job_slots(j, self.geom.page_size) for j in jobs]
            hi = np.concatenate([h for h, _ in slots])
            di = np.concatenate([d for _, d in slots])
        hi, di = direct_order(self.layout, self.io_backend, hi, di)
        handle = jobs[0].handle if len(jobs) == 1 else MergedLoadHandle(self._state, [j.handle for j in jobs],
                                                                        self.geom.layers)
        self._enqueue(Direction.H2D, Job(handle, None, None, (hi, di)) if paged else Job(handle, hi, di), t0)

    # Every check runs here, on the scheduler thread, before anything is queued: a bad
    # transfer found on a worker thread would fail-stop the controller for good.
    def _check_open(self) -> None:
        self._state.raise_if_failed()
        if self._state.closed:
            raise RuntimeError("controller: shut down")

    def _slots(self, device_indices, host_indices, destination: str) -> tuple[np.ndarray, np.ndarray]:
        """Checked slot arrays: equal lengths, whole page-aligned pages in the pools on both
        sides, no destination page twice."""
        self._check_open()
        di = np.asarray(device_indices, dtype=np.int64).reshape(-1)
        hi = np.asarray(host_indices, dtype=np.int64).reshape(-1)
        if len(di) != len(hi):
            raise ValueError(f"host_indices: length {len(hi)} does not match device_indices length {len(di)}")
        ps = self.geom.page_size
        dp, hp = slots_to_pages(di, ps, "device_indices"), slots_to_pages(hi, ps, "host_indices")
        self._check_pages(dp, hp, "indices", destination)
        return di, hi

    def _owned(self, device_pages: np.ndarray, host_pages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._check_open()
        if len(device_pages) != len(host_pages):
            raise ValueError(f"host_pages: length {len(host_pages)} does not match device_pages length "
                             f"{len(device_pages)}")
        return device_pages, host_pages

    def _pages(self, device_pages, host_pages, destination: str) -> tuple[np.ndarray, np.ndarray]:
        self._check_open()
        dp, hp = np.asarray(device_pages), np.asarray(host_pages)
        for name, p in (("device_pages", dp), ("host_pages", hp)):
            if p.ndim != 1 or (p.size and not np.issubdtype(p.dtype, np.integer)):
                raise ValueError(f"{name}: expected a 1-D integer array, got shape {p.shape} dtype {p.dtype}")
        if len(dp) != len(hp):
            raise ValueError(f"host_pages: length {len(hp)} does not match device_pages length {len(dp)}")
        dp, hp = dp.astype(np.int64, copy=False), hp.astype(np.int64, copy=False)
        self._check_pages(dp, hp, "pages", destination)
        return dp, hp

    def _check_pages(self, dp: np.ndarray, hp: np.ndarray, unit: str, destination: str) -> None:
        """Pages inside both pools and no destination page twice; errors name `<side>_<unit>`."""
        for side, p, pool in (("device", dp, self.device_pool), ("host", hp, self.host_pool)):
            if len(p) and (p.min() < 0 or p.max() >= pool.num_tokens // self.geom.page_size):
                raise ValueError(f"{side}_{unit}: outside the {side} pool of {pool.num_tokens} slots")
        if has_duplicates(hp if destination == "host" else dp):
            raise ValueError(f"{destination}_{unit}: the same destination page twice in one transfer")

    def _enqueue(self, name: str, job: Job, t0: float) -> None:
        d = self._dirs[name]
        with self._state.lock:
            d.pending += 1
        d.put(job)  # inline: runs it now
        spent = time.perf_counter() - t0
        if spent > d.stats.max_enqueue_seconds:
            d.stats.max_enqueue_seconds = spent

    # -- scheduler thread: completions ------------------------------------------------------
    def poll(self) -> list[Ack]:
        """Acks of transfers completed since the last poll, in completion order (see the module
        docstring for the two directions); raises TransferError once any transfer failed (and on
        every later call)."""
        self._state.raise_if_failed()
        return self._state.take_acks()

    @property
    def pending(self) -> int:
        """Transfers enqueued and not yet acknowledged by a watcher."""
        with self._state.lock:
            return sum(d.pending for d in self._dirs.values())

    def flush(self, timeout: float | None = None) -> list[Ack]:
        """Wait until every queued transfer completed, then `poll()`. After shutdown, `poll()`
        at once: a cancelled or timed-out shutdown can leave transfers that no watcher will
        ever acknowledge, and waiting for them would hang."""
        st = self._state
        if st.closed:
            return self.poll()
        self.submit_held()  # held loads are queued transfers too
        deadline = None if timeout is None else time.monotonic() + timeout
        with st.waiting(), st.lock:
            while st.error is None and any(d.pending for d in self._dirs.values()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"controller: {self.pending} transfers still pending after {timeout} s")
                st.lock.wait(left)
        return self.poll()

    def stats(self) -> ControllerStats:
        st = self._state
        with st.lock:
            s = ControllerStats(
                *(DirectionStats(**vars(self._dirs[n].stats)) for n in DIRECTIONS),
                wall_seconds=st.last_completion - st.started,
            )
        return s

    def shutdown(self, timeout: float = 10.0, drain: bool = True) -> list[Ack]:
        """Stop the threads: with `drain`, after every queued transfer ran; else cancel what
        has not been submitted (its handles raise TransferCancelled). Returns the acks not yet
        polled; raises an error not yet reported, or TimeoutError if a thread is stuck."""
        st = self._state
        if st.closed:
            return self.poll()
        if drain:
            self.submit_held()
        else:
            for job in self._held or []:
                job.handle._submit_held = None
                job.handle._fail(TransferCancelled(f"h2d transfer {job.handle.tag!r}: cancelled"))
        self._held = None
        st.closed = True
        st.hurry.set()
        if not drain:
            st.cancelled.set()
        for d in self._dirs.values():
            d.stop()
        deadline = time.monotonic() + timeout
        stuck = []
        for d in self._dirs.values():
            for t in d.threads():
                t.join(max(0.0, deadline - time.monotonic()))
                if t.is_alive():
                    stuck.append(t.name)
        if stuck:
            st.cancelled.set()  # let watchers blocked on events leave when they can
            raise TimeoutError(f"controller: thread(s) {', '.join(stuck)} still running after {timeout} s")
        for d in self._dirs.values():
            d.stream.close()
        if st.error is not None and not st.error_reported:
            st.raise_if_failed()
        return st.take_acks()

    def __enter__(self) -> CacheController:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.shutdown()
        else:  # do not hide the caller's exception behind a drain
            try:
                self.shutdown(drain=False)
            except Exception:  # noqa: BLE001
                pass
