"""Ghost list: a bounded LRU set of 64-bit page hashes recently evicted from L1.

A page that comes back after eviction proves that backing it up would have paid. On insert the tree
scans the request's pages backward for the first recorded one and backs up that prefix too.
`report()` measures an entry's bytes on this interpreter, since memory decides whether the list is
affordable.
"""

from __future__ import annotations

import tracemalloc
from collections import OrderedDict

_MEASURED: dict[int, float] = {}  # sample size -> bytes per entry


def measure_bytes_per_entry(sample: int = 20_000) -> float:
    """Bytes one entry costs (to 0.1 byte), traced while filling a fresh list with `sample` 64-bit hashes."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        g = GhostList(sample)
        # Distinct full-width 64-bit values, like real hash64 keys (small ints would be cached).
        for i in range(sample):
            g.add((0x9E3779B97F4A7C15 * (i + 1)) & 0xFFFFFFFFFFFFFFFF | (1 << 63))
        after = tracemalloc.get_traced_memory()[0]
    finally:
        if not was_tracing:
            tracemalloc.stop()
    del g
    # To 0.1 byte: what else the process allocated before (a free list refilled, a one-off object)
    # moves the traced total by a few bytes, a few ten-thousandths of a byte an entry.
    return round((after - before) / sample, 1)


class GhostList:
    """LRU set of at most `capacity` integer keys; adding past the bound drops the oldest."""

    def __init__(self, capacity: int):
        if not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"capacity: must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.added = 0
        self.dropped = 0
        self.hits = 0

    def add(self, key: int) -> None:
        """Record (or refresh) `key` as most recently evicted."""
        lru = self._lru
        if key in lru:
            lru.move_to_end(key)
            return
        lru[key] = None
        self.added += 1
        if len(lru) > self.capacity:
            lru.popitem(last=False)
            self.dropped += 1

    def __contains__(self, key: int) -> bool:
        return key in self._lru

    def hit(self, key: int) -> bool:
        """Membership test that counts and refreshes a hit (the tree's backward scan uses it)."""
        if key in self._lru:
            self._lru.move_to_end(key)
            self.hits += 1
            return True
        return False

    def __len__(self) -> int:
        return len(self._lru)

    def keys(self) -> list[int]:
        """Keys from least to most recently added."""
        return list(self._lru)

    def report(self) -> dict:
        """Entries, bound and measured bytes per entry (at this list's bound, sampled up to 100k:
        dict tables grow in powers of two, so the per-entry figure moves by ~+-15% with fill)."""
        sample = min(max(self.capacity, 1000), 100_000)
        if sample not in _MEASURED:
            _MEASURED[sample] = measure_bytes_per_entry(sample)
        per_entry = _MEASURED[sample]
        return {
            "entries": len(self._lru),
            "bound": self.capacity,
            "bytes_per_entry": round(per_entry, 1),
            "bytes_at_bound": round(per_entry * self.capacity),
            "added": self.added,
            "dropped": self.dropped,
            "hits": self.hits,
        }
