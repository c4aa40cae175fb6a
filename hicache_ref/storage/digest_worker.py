"""The thread a storage client digests and verifies on, beside the backend's own I/O.

A set seals chunk i + 1 there while the backend writes chunk i; a get verifies chunk i there while
the backend reads chunk i + 1. One thread per client, started on first use and ended by `close`.
Work submitted from that thread itself, or once the worker is closed, runs on the caller instead:
the worker never waits on itself, and none outlives its client.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor


def _mark_worker(local: threading.local) -> None:
    local.yes = True


class DigestWorker:
    """One client's worker thread; `name` prefixes the thread's name."""

    def __init__(self, name: str):
        self.name = name
        self.executor: ThreadPoolExecutor | None = None
        self.closed = False
        self._lock = threading.Lock()
        self._on_worker = threading.local()  # .yes on the worker's own thread

    def submit(self, fn, *args) -> Future:
        """Run `fn(*args)` on the worker thread (started on first use); here instead when called on
        the worker (which would wait on itself) or once closed (no new worker outlives `close`)."""
        with self._lock:
            if self.closed or getattr(self._on_worker, "yes", False):
                return self.inline(fn, *args)
            if self.executor is None:
                # the initializer holds the thread-local, not the client: a client dropped unclosed
                # frees its executor at once, and the worker thread ends with it
                self.executor = ThreadPoolExecutor(1, thread_name_prefix=self.name,
                                                   initializer=_mark_worker, initargs=(self._on_worker,))
            return self.executor.submit(fn, *args)

    @staticmethod
    def inline(fn, *args) -> Future:
        """`fn(*args)` run here, as a done Future (an Exception kept in it, as the worker keeps one)."""
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except Exception as e:  # noqa: BLE001 - handed to whoever takes the result
            done.set_exception(e)
        return done

    def close(self) -> None:
        """Run what is submitted from now on here, and wait for the thread to finish what it holds."""
        with self._lock:
            self.closed = True
            executor, self.executor = self.executor, None
        if executor is not None:
            executor.shutdown(wait=True)
