"""torch.cuda streams and events for the CUDA-like backends, with host-side D2H scatters.

A D2H plan with many segments lands its rows in pinned staging memory; scattering them into the
host buffer is CPU work that must follow the device copy. Each stream runs those scatters on a
completion thread in submission order, and the event recorded after the plan covers them.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from hal.backend import Event, Stream


class CudaEvent(Event):
    """A torch.cuda.Event plus, for D2H gathers, the host-side scatter that follows it."""

    modeled_time = None

    def __init__(self, torch_event: torch.cuda.Event, keep: list, earlier: list[CudaEvent],
                 host_tail: list[Callable[[], Any]] | None):
        self.torch_event = torch_event
        self._keep = keep  # staging and index tensors the queued work still reads
        self._earlier = earlier  # host tails queued before this event on the same stream
        self._host_tail = host_tail
        self._host_done = threading.Event()
        self._error: BaseException | None = None
        if not host_tail:
            self._host_done.set()

    def host_pending(self) -> bool:
        return not self._host_done.is_set() or any(e.host_pending() for e in self._earlier)

    def _run_host_tail(self) -> None:  # on the stream's completion thread
        try:
            self.torch_event.synchronize()
            for step in self._host_tail:
                step()
        except BaseException as e:  # noqa: BLE001 - re-raised by wait()
            self._error = e
        finally:
            self._host_tail = None
            self._keep = []
            self._host_done.set()

    def query(self) -> bool:
        done = self.torch_event.query() and self._host_done.is_set() and all(e.query() for e in self._earlier)
        if done:
            self._keep = []
        return done

    def wait(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        if deadline is None:
            self.torch_event.synchronize()
        while deadline is not None and not self.torch_event.query():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"event not complete after {timeout} s")
            time.sleep(1e-4)
        if not self._host_done.wait(left()):
            raise TimeoutError(f"host-side scatter not complete after {timeout} s")
        for e in self._earlier:
            e.wait(left())
        self._keep = []
        if self._error is not None:
            raise RuntimeError(f"host-side scatter of a D2H plan failed: {self._error!r}") from self._error


class CudaStream(Stream):
    """A torch.cuda.Stream, plus a worker that finishes host-side scatters in submission order.

    The worker thread exists only while scatters are queued, so idle streams hold no thread.
    """

    def __init__(self, torch_stream: torch.cuda.Stream):
        self.torch_stream = torch_stream
        self._lock = threading.Lock()
        self._pending: list[CudaEvent] = []  # events whose host tail has not run yet
        self._queue: collections.deque[CudaEvent] = collections.deque()
        self._worker: threading.Thread | None = None

    def _tail_loop(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._worker = None
                    return
                ev = self._queue.popleft()
            ev._run_host_tail()

    def _record(self, keep: list, host_tail: list | None) -> CudaEvent:
        ev = torch.cuda.Event()
        ev.record(self.torch_stream)
        with self._lock:
            self._pending = [e for e in self._pending if not e._host_done.is_set()]
            out = CudaEvent(ev, keep, list(self._pending), host_tail)
            if host_tail:
                self._pending.append(out)
                self._queue.append(out)
                if self._worker is None:
                    self._worker = threading.Thread(target=self._tail_loop, name="cudalike-host-tail", daemon=True)
                    self._worker.start()
        return out

    def record(self) -> CudaEvent:
        return self._record([], None)

    def record_keeping(self, keep: list) -> CudaEvent:
        """An event like record()'s that also keeps `keep` (tensors queued work still reads,
        e.g. a vendor kernel's pointer tables) alive until it completes."""
        return self._record(list(keep), None)

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, CudaEvent):
            raise ValueError(f"event: {event!r} is not a cuda/xpu event")
        # The device cannot order after a CPU-side scatter; only then does the caller block.
        if event.host_pending():
            event.wait()
        self.torch_stream.wait_event(event.torch_event)

    def synchronize(self) -> None:
        """Wait for the device and for queued host scatters; re-raise the first scatter failure."""
        self.torch_stream.synchronize()
        with self._lock:
            pending, self._pending = self._pending, []
        first: BaseException | None = None
        for e in pending:
            try:
                e.wait()
            except RuntimeError as err:
                first = first or err
        if first is not None:
            raise first
