"""`memory`: an in-process, size-bounded LRU store; the L3 of one process (tests, a NULL-like L3).

Spec `memory:[max_bytes=SIZE][,digest=NAME]` (default 1 GiB). Objects are Python bytes, so every
set and get copies once; the store dies with the client (no restart survives).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from hicache_ref.storage.base import StorageBackend, rows
from hicache_ref.storage.integrity import DEFAULT_DIGEST
from hicache_ref.storage.registry import parse_options

DEFAULT_MAX_BYTES = 1 << 30


class MemoryStorage(StorageBackend):
    name = "memory"
    shared = False
    persistent = False

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, digest: str = DEFAULT_DIGEST):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(f"max_bytes: expected a positive integer, got {max_bytes!r}")
        super().__init__(digest)
        self.max_bytes = max_bytes
        self._objects: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, args: str, spec: str) -> MemoryStorage:
        opts = parse_options([a for a in args.split(",") if a.strip()], spec, {"max_bytes": "size", "digest": "digest"})
        return cls(**opts)

    @property
    def stored_bytes(self) -> int:
        return self._bytes

    def _contains(self, key: str) -> bool:
        with self._lock:
            return key in self._objects

    def _write_one(self, key, segments) -> bool:
        blob = b"".join(rows(segments))
        if len(blob) > self.max_bytes:
            return False
        with self._lock:
            old = self._objects.pop(key, None)
            self._bytes -= len(old) if old is not None else 0
            self._objects[key] = blob
            self._bytes += len(blob)
            while self._bytes > self.max_bytes:
                _, dropped = self._objects.popitem(last=False)
                self._bytes -= len(dropped)
        return True

    def _discard(self, key: str) -> None:
        with self._lock:
            blob = self._objects.pop(key, None)
            self._bytes -= len(blob) if blob is not None else 0

    def _read_into(self, key, targets) -> int:
        with self._lock:
            blob = self._objects.get(key)
            if blob is None:
                return -1
            self._objects.move_to_end(key)
        view, off = memoryview(blob), 0
        for row in rows(targets):
            n = min(len(row), len(blob) - off)
            if n > 0:
                row[:n] = np.frombuffer(view[off : off + n], dtype=np.uint8)
                off += n
        return len(blob)

    def _close(self) -> None:
        with self._lock:
            self._objects.clear()
            self._bytes = 0


STORE = MemoryStorage
