"""What one L3 storage client counts: objects and bytes moved, and every outcome that was not a plain
success, each under its own name (a miss, a corrupt object, a backend error, a page read without a
trailer, an object a full store had no room for).

The base contract (hicache_ref.storage.base) keeps one per client and adds to it under a lock; the
replay's L3 figures and the storage conformance suite read it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class StorageStats:
    """Counters of one client; objects and payload bytes, misses, corrupt objects, backend errors,
    pages read whole from objects without a trailer (size checked, content not: `unverified`), and
    objects a full store had no room for (`full`: a capacity outcome, not an error)."""

    objects_read: int = 0
    bytes_read: int = 0
    objects_written: int = 0
    bytes_written: int = 0
    misses: int = 0
    corrupt: int = 0
    errors: int = 0
    unverified: int = 0
    full: int = 0

    def as_dict(self) -> dict:
        return asdict(self)
