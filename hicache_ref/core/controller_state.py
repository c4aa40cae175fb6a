"""The cache controller's shared state: what its scheduler thread, direction workers and handles all touch.

One object holds the lock, the unpolled acks, the fail-stop error, the cancel flag and the hurry
flag, and is handed to each worker and handle instead of the controller, so none of them reaches
into another's privates.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Any


class TransferError(RuntimeError):
    """A transfer failed on a controller thread; raised on the scheduler thread."""


class TransferCancelled(RuntimeError):
    """The controller shut down without draining before this transfer ran."""


class ControllerState:
    """Lock, acks, fail-stop error and the cancel / hurry flags of one controller."""

    def __init__(self):
        self.lock = threading.Condition()
        self.acks: deque = deque()  # Ack, completion order
        self.error: TransferError | None = None
        self.error_reported = False  # raised to the scheduler thread at least once
        self._error_handle: Any = None  # the handle whose failure `error` is
        self.cancelled = threading.Event()
        self.hurry = threading.Event()
        self._waiters = 0
        self.closed = False
        self.started = self.last_completion = time.perf_counter()

    @contextmanager
    def waiting(self):
        """Mark a wait for completions: batching submitters stop waiting for company."""
        with self.lock:
            self._waiters += 1
            self.hurry.set()
        try:
            yield
        finally:
            with self.lock:
                self._waiters -= 1
                if not self._waiters and not self.closed:
                    self.hurry.clear()

    def note_error(self, handle, error: BaseException, reported: bool = False) -> TransferError:
        """Make the controller fail-stop on its first failed transfer; returns this one's error.

        `handle`: the failed transfer's handle (direction, tag, num_tokens). `reported`: the
        caller raises it on the scheduler thread now (a handle's wait). A failure seen twice
        (by the watcher and by a handle's wait) stays one error object.
        """
        with self.lock:
            if self.error is not None and self._error_handle is handle:
                wrapped = self.error
            else:
                wrapped = _wrap(handle.direction, handle.tag, handle.num_tokens, error)
            if self.error is None:
                self.error, self._error_handle = wrapped, handle
            if reported and self.error is wrapped:
                self.error_reported = True
            self.lock.notify_all()
        return wrapped

    def raise_if_failed(self) -> None:
        """Raise the fail-stop error, if any (on the scheduler thread: it counts as reported)."""
        if self.error is not None:
            self.error_reported = True
            raise self.error

    def take_acks(self) -> list:
        """The acks not yet handed out, oldest first; the queue is left empty."""
        with self.lock:
            acks = list(self.acks)
            self.acks.clear()
        return acks


def _wrap(direction: str, tag: Any, tokens: int, error: BaseException) -> TransferError:
    if isinstance(error, TransferError):
        return error
    e = TransferError(f"{direction} transfer {tag!r} ({tokens} tokens) failed: {error!r}")
    e.__cause__ = error
    return e
