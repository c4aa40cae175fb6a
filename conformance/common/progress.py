"""Progress for runs that take more than a few seconds: an elapsed-time line on stderr.

Only where a person watches: stderr is a terminal and --quiet was not given. The line is
redrawn in place every second after the first `after` seconds and erased when the run ends,
so stdout (tables, JSON) is never touched. Most library loops report no fraction done, so
`ticker` says what runs and for how long; loops that count their steps (sweep tiers, ablate
rungs) draw a `bar` of done/total instead.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager


@contextmanager
def ticker(label: str, quiet: bool = False, stream=None, after: float = 2.0, every: float = 1.0):
    stream = sys.stderr if stream is None else stream
    if quiet or not getattr(stream, "isatty", lambda: False)():
        yield
        return
    done = threading.Event()
    start = time.monotonic()
    drawn = [False]

    def draw() -> None:
        if done.wait(after):
            return
        while True:
            stream.write(f"\r{label}: {time.monotonic() - start:.0f} s")
            stream.flush()
            drawn[0] = True
            if done.wait(every):
                return

    thread = threading.Thread(target=draw, name="hicache-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if drawn[0]:
            stream.write("\r\033[K")
            stream.flush()


def bar(label: str, quiet: bool = False, unit: str = ""):
    """A `progress(done, total)` callback drawing `label [###...] done/total unit` on stderr, or
    None where nobody watches (not a terminal, or --quiet)."""
    if quiet or not sys.stderr.isatty():
        return None

    def draw(done: int, total: int) -> None:
        filled = 30 * done // total
        sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}{unit}")
        if done == total:
            sys.stderr.write("\r\033[K")
        sys.stderr.flush()

    return draw
