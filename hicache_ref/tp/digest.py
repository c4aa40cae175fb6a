"""The SPMD self-check: a 64-bit digest of allocator decisions, compared across ranks every K ops.

A shared host pool is correct only while every rank allocates alike. Each decision is chained into
a digest; the ranks compare digests (and a digest of the KV they read) at intervals, and on a
mismatch every rank raises with the first differing operation and each rank's decision there.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from hicache_ref.core.allocator import pages_to_slots, slots_to_pages
from hicache_ref.tp.group import Group

DECISION_CHARS = 200  # a decision is shown up to this length in an error


def _h64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def signed(u: int) -> int:
    """A 64-bit unsigned digest as the int64 a collective carries."""
    return u - (1 << 64) if u >= 1 << 63 else u


class SpmdDivergence(RuntimeError):
    """The ranks' allocation decisions (or the KV bytes they read) differ."""

    def __init__(self, op: int, decisions: dict[int, str], what: str = "allocator decisions"):
        self.op, self.decisions, self.what = op, decisions, what
        shown = "; ".join(f"rank {r}: {d}" for r, d in sorted(decisions.items()))
        super().__init__(f"SPMD divergence: {what} differ first at op {op} ({shown})")


class DecisionLog:
    """Per-op decisions of this rank since the last agreeing check, and the running digests."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled  # False: log nothing (the bench's baseline for the self-check's cost)
        self.digest = 0  # decisions
        self.read_digest = 0  # KV bytes read
        self.op = -1
        self._parts: list[str] = []
        self.window: list[tuple[int, int, int, str]] = []  # (op, digest, read digest, decisions)
        self.seconds = 0.0  # spent logging (part of the self-check's overhead)

    def begin(self, op: int) -> None:
        self.op, self._parts = op, []

    def record(self, tier: str, kind: str, pages) -> None:
        if not self.enabled:
            return
        t0 = time.perf_counter()
        if pages is None:
            text, blob = f"{tier} {kind} none", b""
        else:
            arr = np.asarray(pages, dtype=np.int64)
            text, blob = f"{tier} {kind} {arr.tolist()}", arr.tobytes()
        self._parts.append(text)
        head = f"{self.op}|{tier}|{kind}|{'-' if pages is None else len(blob)}|".encode()
        self.digest = _h64(self.digest.to_bytes(8, "big") + head + blob)
        self.seconds += time.perf_counter() - t0

    def record_read(self, data: bytes) -> None:
        if not self.enabled:
            return
        t0 = time.perf_counter()
        self.read_digest = _h64(self.read_digest.to_bytes(8, "big") + data)
        self.seconds += time.perf_counter() - t0

    def end(self) -> None:
        if not self.enabled:
            return
        text = "; ".join(self._parts) or "no allocator call"
        if len(text) > DECISION_CHARS:
            text = text[: DECISION_CHARS - 3] + "..."
        self.window.append((self.op, self.digest, self.read_digest, text))


class RecordingAllocator:
    """A PageAllocator whose alloc/free decisions go to a DecisionLog (everything else delegates)."""

    def __init__(self, inner, log: DecisionLog, tier: str):
        self._inner, self._log, self._tier = inner, log, tier

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def alloc_pages(self, n_pages: int):
        pages = self._inner.alloc_pages(n_pages)
        self._log.record(self._tier, f"alloc {int(n_pages)}", pages)
        return pages

    def free_pages(self, pages) -> None:
        self._inner.free_pages(pages)
        self._log.record(self._tier, "free", pages)

    def alloc(self, n_tokens: int):
        pages = self.alloc_pages(int(n_tokens) // self._inner.page_size)
        return None if pages is None else pages_to_slots(pages, self._inner.page_size)

    def free(self, indices) -> None:
        self.free_pages(slots_to_pages(indices, self._inner.page_size))


class SpmdCheck:
    """Compares `log` across `group` every `every` ops (`after_op`) and at the end (`check`)."""

    def __init__(self, group: Group, log: DecisionLog, every: int):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"check_every: expected a positive number of ops, got {every!r}")
        self.group, self.log, self.every = group, log, every
        self.checks = 0
        self.reads_identical = True
        self.seconds = 0.0  # in the comparisons (collectives, including waiting for the slowest rank)

    def after_op(self, op: int) -> None:
        if (op + 1) % self.every == 0:
            self.check()

    def check(self) -> None:
        """Raise SpmdDivergence on every rank if the ranks' decisions differ (reads: noted)."""
        log = self.log
        if not log.enabled:
            return
        t0 = time.perf_counter()
        try:
            rows = self.group.all_gather([signed(log.digest), signed(log.read_digest)])
            self.checks += 1
            if len({r[0] for r in rows}) > 1:
                self._raise_first(1, "allocator decisions")
            if len({r[1] for r in rows}) > 1:
                self.reads_identical = False
                self._raise_first(2, "KV bytes read")
            log.window = []
        finally:
            self.seconds += time.perf_counter() - t0

    def _raise_first(self, field: int, what: str) -> None:
        windows = self.group.all_gather_object(self.log.window)
        length = min(len(w) for w in windows)
        for i in range(length):
            if len({w[i][field] for w in windows}) > 1:
                raise SpmdDivergence(windows[0][i][0], {r: w[i][3] for r, w in enumerate(windows)}, what)
        op = windows[0][length - 1][0] if length else -1  # only the window lengths differ
        raise SpmdDivergence(op, {r: f"{len(w)} ops logged" for r, w in enumerate(windows)}, what)
