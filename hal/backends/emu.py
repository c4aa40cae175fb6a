"""CPU emulation backend: real threads and real copies, plus a modeled clock.

"Device" buffers are CPU tensors and each stream is a worker thread, so the cache's concurrency is
real. Every plan also advances its stream's modeled clock by the profile's link model; wall time and
modeled time are reported apart, never mixed. Registration is a real mlock of the range.
An inline stream (`inline_stream`) does the same work on the submitting thread instead: the copies
are synchronous CPU work either way, and a caller that waits for each transfer saves the hand-offs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import queue
import threading
import time
import weakref
from typing import Any

import torch

from hal.backend import Backend, Capabilities, Event, Stream
from hal.backends.support.modeled_clock import (
    HostFactorsMixin,
    ModeledClock,
    modeled_profile,
    plan_seconds,
)
from hal.transfer import segcopy
from hal.transfer.plan import TransferPlan

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mlock.argtypes = _libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


_BATCH_BYTES = 256 << 20  # a batch stops growing here, so early events are not held back long
_CLOSE_JOIN_SECONDS = 10.0  # how long closing a stream waits for its queued work and thread


class EmuEvent(Event):
    def __init__(self):
        self._done = threading.Event()
        self.error: BaseException | None = None
        self.modeled_time: float | None = None
        self.wall_time: float | None = None  # time.perf_counter() at completion

    def _complete(self, modeled: float | None, error: BaseException | None) -> None:
        self.modeled_time, self.error, self.wall_time = modeled, error, time.perf_counter()
        self._done.set()

    def query(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> None:
        if not self._done.wait(timeout):
            raise TimeoutError(f"event not complete after {timeout} s")
        if self.error is not None:
            raise RuntimeError(f"transfer failed on its stream: {self.error!r}") from self.error


class EmuStream(Stream):
    """FIFO work on one worker thread, or with `inline` on the submitting thread before each call
    returns (no thread: events are complete when recorded, a wait_event blocks the caller). A
    failure is sticky: later events on the stream carry it."""

    def __init__(self, backend: EmuBackend, name: str, inline: bool = False):
        self.backend, self.name, self.inline = backend, name, inline
        self.clock = ModeledClock()
        self._error: BaseException | None = None
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = None if inline else threading.Thread(target=self._loop, name=f"emu-{name}", daemon=True)
        if self._thread is not None:
            self._thread.start()

    def _loop(self) -> None:
        item = None
        while True:
            kind, payload = item or self._q.get()
            if kind == "stop":
                return
            item = self._run((kind, payload), gather=True)

    def _run(self, item: tuple, gather: bool = False) -> tuple | None:
        """Run one queued item; a plan with `gather` runs with the plans queued behind it (the
        worker's batching). Returns the first queued item not taken, if any."""
        kind, payload = item
        after, before = None, self._error
        try:
            if kind == "plan":
                batch, after = self._gather([item]) if gather else ([item], None)
                self._run_batch(batch)
            elif kind == "wait" and self._error is None:
                payload.wait()
                self.clock.wait_until(payload.modeled_time)
            elif kind == "event":
                payload._complete(self.clock.reading(), self._error)
        except BaseException as e:  # noqa: BLE001 - carried to the events, never lost
            self._error = e
        if self.inline and self._error is not before and not isinstance(self._error, Exception):
            raise self._error  # Ctrl-C on the submitting thread interrupts it (the stream has failed too)
        return after

    def _gather(self, batch: list) -> tuple[list, tuple | None]:
        """Extend a plan with the plans and events already queued behind it.

        One copy call for queued plans keeps the copy threads busy instead of meeting at a
        barrier per plan (per-layer loads: 78 small plans). Plans run concurrently then, so
        a plan joins only if it touches no buffer an earlier one in the batch writes, and
        writes none that one reads (by address range, so views of one storage count). If a
        plan of a batch fails, the stream fails from it on, but later plans of the batch may
        already have written their bytes. Returns the batch and the first item not taken.
        """
        reads, writes = _extents(batch[0][1])
        nbytes = batch[0][1].nbytes
        while nbytes < _BATCH_BYTES:
            try:
                kind, payload = self._q.get_nowait()
            except queue.Empty:
                return batch, None
            if kind == "plan":
                r, w = _extents(payload)
                if _overlap(r + w, writes) or _overlap(w, reads):
                    return batch, (kind, payload)
                reads, writes, nbytes = reads + r, writes + w, nbytes + payload.nbytes
            elif kind != "event":
                return batch, (kind, payload)
            batch.append((kind, payload))
        return batch, None

    def _run_batch(self, batch: list) -> None:
        """Copy every plan of the batch, then advance the clock and complete events in order."""
        if self._error is None:
            try:
                groups = [g for kind, p in batch if kind == "plan" for g in p.groups]
                segcopy.copy_groups(groups)
            except BaseException as e:  # noqa: BLE001 - carried to the batch's events
                self._error = e
        for kind, payload in batch:
            if kind == "plan" and self._error is None:
                try:
                    self._account(payload)
                except BaseException as e:  # noqa: BLE001 - the stream has failed from here on
                    self._error = e
            elif kind == "event":
                payload._complete(self.clock.reading(), self._error)

    def _account(self, plan: TransferPlan) -> None:
        """Advance the modeled clock by one executed plan. Tests override it to inject a
        device fault at the k-th plan (the stream then fails as a real one would)."""
        self.clock.advance(self.backend.model_seconds(plan))

    def submit(self, kind: str, payload: Any) -> None:
        if self.inline:
            self._run((kind, payload))
        else:
            self._q.put((kind, payload))

    def record(self) -> EmuEvent:
        ev = EmuEvent()
        self.submit("event", ev)
        return ev

    def wait_event(self, event: Event) -> None:
        self.submit("wait", event)

    def synchronize(self) -> None:
        self.record().wait()

    def close(self, timeout: float = _CLOSE_JOIN_SECONDS) -> None:
        """Queued work finishes first; the worker thread then ends, and close waits for it (at
        most `timeout` s): a worker still inside a copy when the interpreter exits is killed
        mid-op, and the process aborts ("terminate called without an active exception")."""
        if self._thread is None:  # inline: nothing is queued, no thread to end
            return
        self._q.put(("stop", None))
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


class EmuBackend(HostFactorsMixin, Backend):
    name = "emu"
    device_type = "cpu"
    default_profile = "emu"
    stream_type = EmuStream
    runs_inline = True

    def __init__(self, profile: Any = None):
        super().__init__(modeled_profile(profile, self.default_profile))
        self._streams_made = 0
        self._streams: weakref.WeakSet[EmuStream] = weakref.WeakSet()
        self._default: EmuStream | None = None

    @classmethod
    def probe(cls) -> tuple[bool, str]:
        return True, ""

    def capabilities(self) -> Capabilities:
        return Capabilities(name=self.name, available=True, reason="", device_type="cpu", modeled_clock=True,
                            host_registration=True)

    def alloc_device(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        # CPU memory standing for the device, told apart by address until freed (the base's)
        return self.alloc_cpu_device(shape, dtype)

    def new_stream(self) -> EmuStream:
        self._streams_made += 1
        return self._track(EmuStream(self, f"s{self._streams_made}"))

    def inline_stream(self) -> EmuStream:
        """A stream running its work on the submitting thread (see EmuStream): the copies are
        synchronous CPU work here, so a caller that waits for each one loses nothing."""
        self._streams_made += 1
        return self._track(EmuStream(self, f"i{self._streams_made}", inline=True))

    def _track(self, stream: EmuStream) -> EmuStream:
        self._streams.add(stream)
        return stream

    def default_stream(self) -> EmuStream:
        # Made on first use: a backend only asked for topology or memory starts no thread.
        if self._default is None:
            self._default = self._track(EmuStream(self, "default"))
        return self._default

    def close(self) -> None:
        for stream in list(self._streams):
            stream.close()
        self._default = None

    def model_seconds(self, plan: TransferPlan) -> float | None:
        """Modeled cost of `plan` on the profile's link, or None when the profile can't say."""
        return plan_seconds(self.profile.link, plan, self.host_factors)

    def _execute(self, plan: TransferPlan, stream: EmuStream) -> EmuEvent:
        stream.submit("plan", plan)
        return stream.record()

    def _register_range(self, address: int, nbytes: int) -> tuple[int, int]:
        # Pinning is what registration does to the pages; mlock is the same kernel work.
        if _libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(nbytes)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mlock of {nbytes} bytes failed: {os.strerror(err)} (check `ulimit -l`)")
        return address, nbytes

    def _unregister_range(self, handle: tuple[int, int]) -> None:
        address, nbytes = handle
        _libc.munlock(ctypes.c_void_p(address), ctypes.c_size_t(nbytes))


def _extents(plan: TransferPlan) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """[start, end) address ranges of the buffers a plan reads and writes (every plan here is of
    tensors: Backend.execute refuses symbolic ones, which run on count)."""

    def extent(t: torch.Tensor) -> tuple[int, int]:
        return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()

    return [extent(g.src) for g in plan.groups], [extent(g.dst) for g in plan.groups]


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


BACKEND = EmuBackend
