"""How a `hicache` run ends when it is stopped: SIGTERM and SIGHUP raised as an interrupt, the
interrupt found behind a cleanup error, and the threads the run started waited for.

A signal becomes `Terminated`, a KeyboardInterrupt, so every cleanup Ctrl-C runs (children stopped,
shared files and the output folder's lock removed) runs for it too.
"""

from __future__ import annotations

import signal
import threading
import time

THREAD_JOIN_SECONDS = 10.0
# the signals a run ends on, each with the word the command prints for it
ENDING = {signal.SIGTERM: "terminated", signal.SIGHUP: "hung up (SIGHUP)"}


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (the terminal closed), raised in the main thread like Ctrl-C, so every
    cleanup an interrupt runs (children stopped, shared files and the output folder's lock removed)
    runs for it too. `signum`: which; the exit status is 128 + it."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


def raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


def join_new_threads(before: set[threading.Thread], timeout: float = THREAD_JOIN_SECONDS) -> None:
    """Wait for the threads this command started (emu stream workers end shortly after their
    backend closes). A daemon thread still inside a torch op when the interpreter finalizes is
    killed there, and C++ aborts the process ("terminate called without an active exception"),
    so a run that was done, or interrupted and cleaned up, would end in SIGABRT."""
    deadline = time.monotonic() + timeout
    for t in threading.enumerate():
        if t not in before and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))


def interrupt_behind(e: BaseException, depth: int = 16) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (Ctrl-C, or a signal as Terminated) in `e`'s causes or context, if any."""
    while e is not None and depth > 0:
        if isinstance(e, KeyboardInterrupt):
            return e
        e, depth = e.__cause__ or e.__context__, depth - 1
    return None
