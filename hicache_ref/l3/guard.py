"""L3 faults: count them, stop using the store for a while, retry with backoff.

A storage call that raises, returns a malformed answer or misses its deadline is one
error (`errors`, reported as `l3_errors`). After an error the tier skips L3 for
`backoff` requests (1, then doubling per consecutive error up to MAX_BACKOFF_REQUESTS),
then tries again; the first call that succeeds resets the backoff. Backoff counts
requests, not seconds, so a replay that meets the same faults makes the same decisions;
the cache meanwhile runs on L1 and L2 alone.
"""

from __future__ import annotations

MAX_BACKOFF_REQUESTS = 64


class FaultGuard:
    """Error counter and request-counted backoff of one L3 tier."""

    def __init__(self, max_backoff: int = MAX_BACKOFF_REQUESTS):
        self.errors = 0
        self.last_error: str | None = None
        self._streak = 0  # consecutive errors
        self._skip = 0  # requests left before L3 is tried again
        self._max = max_backoff

    @property
    def available(self) -> bool:
        """Whether L3 may be used for the current request."""
        return self._skip == 0

    def tick(self) -> None:
        """One request has started: count down the backoff."""
        if self._skip:
            self._skip -= 1

    def failed(self, what: str) -> None:
        self.errors += 1
        self.last_error = what
        self._skip = min(self._max, 2 ** self._streak)
        self._streak += 1

    def succeeded(self) -> None:
        self._streak = 0
