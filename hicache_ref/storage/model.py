"""`model`: an L3 store that keeps keys and sizes and moves no bytes: L3 decisions at any geometry.

Spec `model:` (no arguments; its capacity is the spec's `--l3-tokens`, unlimited without it). It
answers `exists` as a leading run, evicts least recently used objects past its capacity as the file
store does (a read or a rewrite makes an object recent), and counts reads and writes as a real store
would, so the L3 tier above it (prefetch policies, threshold, rate limit, write-back after backup)
decides exactly as over the file store. It runs on the count backend (no KV memory): `get` reports
present objects read and `set` reports them stored without touching the host pool. What moving
them would cost is the profile's l3_link (hicache_ref.sim.price.mechanisms).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from hicache_ref.storage.base import StorageBackend
from hicache_ref.storage.integrity import TRAILER_BYTES


class ModelStorage(StorageBackend):
    name = "model"
    shared = False
    persistent = False
    moves_bytes = False  # the L3 tier skips staging the pages' bytes for it

    def __init__(self, max_tokens: int | None = None):
        super().__init__()
        self.max_tokens: int | None = None
        self.page_size = self.page_bytes = None
        self._objects: OrderedDict[str, None] = OrderedDict()  # oldest first
        self._lock = threading.Lock()
        self._held_at_close: int | None = None
        if max_tokens is not None:
            self.bound_tokens(max_tokens)

    @classmethod
    def from_spec(cls, args: str, spec: str) -> ModelStorage:
        if args.strip():
            raise ValueError(f"storage spec {spec!r}: model: takes no arguments (its capacity is --l3-tokens)")
        return cls()

    def bound_tokens(self, max_tokens: int | None) -> None:
        """Hold at most `max_tokens` tokens (whole pages; None: unlimited)."""
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens <= 0):
            raise ValueError(f"l3_tokens: expected a positive number of tokens, got {max_tokens!r}")
        self.max_tokens = max_tokens

    def size_pages(self, page_size: int, page_bytes: int) -> None:
        """The page the cache stores: objects are pages of `page_size` tokens, `page_bytes` each."""
        self.page_size, self.page_bytes = int(page_size), int(page_bytes)

    @property
    def max_objects(self) -> int | None:
        if self.max_tokens is None or self.page_size is None:
            return None
        return self.max_tokens // self.page_size

    @property
    def max_bytes(self) -> int | None:
        """The bound in object bytes (page and trailer, as a file store would store them); None: unlimited."""
        n = self.max_objects
        return None if n is None or self.page_bytes is None else n * (self.page_bytes + TRAILER_BYTES)

    @property
    def stored_objects(self) -> int:
        """Objects held (at close: what it held then, the store being gone)."""
        return len(self._objects) if self._held_at_close is None else self._held_at_close

    # ---- the contract, without bytes ------------------------------------------------------
    def _contains(self, key: str) -> bool:
        with self._lock:
            return key in self._objects

    def exists(self, keys) -> int:
        """Length of the leading run of `keys` held: one entry per page whatever the object format
        (upstream's object names and parts change no decision, so they are not modeled)."""
        keys = self._open_keys(keys)
        with self._lock:
            n = 0
            while n < len(keys) and keys[n] in self._objects:
                n += 1
        return n

    def get(self, keys, host_pool=None, host_pages=None) -> list[bool]:
        """True per key present (made recent, counted as read); nothing is written to the host pool."""
        keys = self._open_keys(keys)
        self._check_count(host_pages, len(keys))
        with self._lock:
            out = [k in self._objects for k in keys]
            for k, hit in zip(keys, out, strict=True):
                if hit:
                    self._objects.move_to_end(k)
        got = sum(out)
        self._count(objects_read=got, bytes_read=got * (self.page_bytes or 0), misses=len(keys) - got)
        return out

    def set(self, keys, host_pool=None, host_pages=None) -> list[bool]:
        """Record `keys` as stored (each made the most recent), evicting the least recent past the
        capacity; True per key. No byte of the host pool is read."""
        keys = self._open_keys(keys)
        self._check_count(host_pages, len(keys))
        cap = self.max_objects
        if cap == 0:
            return [False] * len(keys)
        with self._lock:
            for k in keys:
                self._objects.pop(k, None)
                self._objects[k] = None
                while cap is not None and len(self._objects) > cap:
                    self._objects.popitem(last=False)
        self._count(objects_written=len(keys), bytes_written=len(keys) * (self.page_bytes or 0))
        return [True] * len(keys)

    @staticmethod
    def _check_count(host_pages, count: int) -> None:
        if host_pages is not None and len(host_pages) != count:
            raise ValueError(f"host_pages: {len(host_pages)} pages for {count} keys")

    def _discard(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)

    def _close(self) -> None:
        with self._lock:
            self._held_at_close = len(self._objects)
            self._objects.clear()


STORE = ModelStorage
