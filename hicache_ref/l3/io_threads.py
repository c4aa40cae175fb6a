"""One daemon thread per L3 direction: storage calls run there, never on the scheduler thread.

`submit(fn)` queues a call and returns an `L3Job` at once. The scheduler thread reads a
job's result only through `result(deadline_s)`, which waits at most that long: a store
that hangs (a killed Mooncake master, a stalled disk) costs the scheduler the deadline
and no more. A job that missed its deadline keeps its thread busy until the call
returns (`busy`); the tier then hands later calls to a fresh worker and stops the old one,
which ends once the hung call comes back (what it would queue behind a hung call could
only miss its deadline too).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

_STOP = object()


class L3Job:
    """A storage call queued on an L3Worker; its outcome once the thread ran it."""

    __slots__ = ("fn", "done", "value", "error")

    def __init__(self, fn: Callable):
        self.fn, self.done, self.value, self.error = fn, threading.Event(), None, None

    def result(self, deadline_s: float):
        """(finished, value, error): the call's return value or exception, or (False, None, None)
        when it has not returned within `deadline_s` wall seconds."""
        if not self.done.wait(deadline_s):
            return False, None, None
        return True, self.value, self.error


class L3Worker:
    """A daemon thread running queued storage calls in order (see the module docstring)."""

    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable) -> L3Job:
        job = L3Job(fn)
        with self._lock:
            self._pending += 1
        self._jobs.put(job)
        return job

    @property
    def busy(self) -> bool:
        """Whether a queued call has not returned yet."""
        with self._lock:
            return self._pending > 0

    def _run(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            try:
                job.value = job.fn()
            except Exception as e:  # the store's failure is the job's outcome, read by the scheduler
                job.error = e
            with self._lock:
                self._pending -= 1
            job.done.set()

    def stop(self, timeout: float) -> bool:
        """Ask the thread to end after its queue; True if it ended within `timeout` seconds."""
        self._jobs.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()
