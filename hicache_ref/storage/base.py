"""The L3 storage contract: batch exists / get / set of whole host-pool pages, with integrity.

`exists` answers with the length of the leading run of keys present, as upstream HiCache storage
does. In the harness's object format (hicache_ref.storage.objects) every object is the page in
canonical byte order plus a digest trailer, checked once for every backend
(hicache_ref.storage.harness_io): a corrupt object is counted and discarded, never returned as KV;
upstream SGLang's format goes through hicache_ref.storage.upstream_io. Backends fill the underscore
hooks; the public methods check the batch (hicache_ref.storage.batch_args), turn a backend's failure
into a count, never the caller's crash, and keep the stats (hicache_ref.storage.client_stats).
"""

from __future__ import annotations

import threading

import numpy as np

from hicache_ref.storage import integrity, objects, pages, upstream_io
from hicache_ref.storage.batch_args import check_keys, check_pages
from hicache_ref.storage.client_stats import StorageStats
from hicache_ref.storage.digest_worker import DigestWorker
from hicache_ref.storage.harness_io import CHUNK_BYTES, HarnessObjectIO
from hicache_ref.storage.staging_buffers import StagingPool


def rows(segments) -> list[np.ndarray]:
    """The 1-D contiguous runs of hook `segments` (2-D uint8 arrays), in object order."""
    return [row for seg in segments for row in seg]


class StorageBackend(HarnessObjectIO):
    """One client of an L3 store. Subclasses fill `_contains`, `_write_one`, `_read_into`, `_discard`
    and the classmethod `from_spec(args, spec)`; `_close` where the client holds resources (and may
    override the batch hooks `_exists`, `_write`, `_read` to batch for real)."""

    name = "storage"
    # What the storage conformance suite may expect of this backend:
    shared = True  # another process opening the same spec sees the objects
    persistent = True  # objects outlive the client that wrote them (a new client reads them)
    set_chunk_bytes = CHUNK_BYTES  # 0: one `_write` per set call (where each call costs round trips)
    get_chunk_bytes = CHUNK_BYTES  # likewise for `_read`
    # True: `_write` takes `trailer_ready` and writes each object's trailer (its last segment) only
    # after `trailer_ready(i)` returns, once the rest is written: for a backend whose object is seen
    # only once whole (the file store's rename), so the digest runs beside the payload's write.
    late_trailer = False

    def __init__(self, digest: str = integrity.DEFAULT_DIGEST):
        self.digest = integrity.check_digest(digest)
        self.stats = StorageStats()
        self.staging = StagingPool()
        self._stats_lock = threading.Lock()
        self._digests = DigestWorker(f"hicache-{self.name}-digest")  # beside the backend's I/O
        self._closed = False
        self.object_format = objects.HARNESS

    def use_format(self, fmt: objects.ObjectFormat) -> None:
        """Name and lay out objects as `fmt` says from now on (the harness's format until called)."""
        if not isinstance(fmt, objects.ObjectFormat):
            raise ValueError(f"fmt: expected an ObjectFormat, got {type(fmt).__name__}")
        self.object_format = fmt

    @property
    def object_parts(self) -> int:
        """Parts of a page under the current format: K and V for MHA, the latent for MLA."""
        return 2 if self.object_format.attention == "mha" else 1

    def upstream_objects(self, fmt, page_key: str, parts: int) -> list[tuple[str, tuple[int, ...]]]:
        """Upstream's objects of one page, [(name, parts it holds)]: MooncakeStore's names unless
        the backend has upstream counterpart of its own (the file store)."""
        return objects.mooncake_names(fmt, page_key, parts)

    # ---- public API (validates once) -------------------------------------------------
    def exists(self, keys) -> int:
        """Length of the leading run of `keys` present in the store (0 on a backend error, counted)."""
        keys = self._open_keys(keys)
        if not keys:
            return 0
        try:
            n = upstream_io.exists(self, keys) if self.object_format.upstream else int(self._exists(keys))
        except Exception:  # noqa: BLE001 - any backend failure is an L3 error, never the caller's crash
            self._count(errors=1)
            return 0
        return max(0, min(n, len(keys)))

    def set(self, keys, host_pool, host_pages) -> list[bool]:
        """Store host-pool pages `host_pages` under `keys`; True per page stored.

        Copies: none for layouts whose page is runs of the pool (page_first_direct, layer_first:
        the backend writes from views of it); one gather per part otherwise."""
        keys = self._open_keys(keys)
        host_pages = check_pages(host_pool, host_pages, len(keys))
        if self.object_format.upstream:
            return upstream_io.set_pages(self, keys, host_pool, host_pages)
        return self._set_harness(keys, host_pool, host_pages)

    def get(self, keys, host_pool, host_pages) -> list[bool]:
        """Read `keys` into host-pool pages `host_pages`; True per page read and verified.

        A missing object is a miss; a corrupt or truncated one is counted and reported False. Where
        the layout keeps a page in runs of the pool (page_first_direct, layer_first) the backend
        reads straight into the pool (no copy): a page reported False may then hold partial or
        damaged bytes and must not be used, exactly as an unfilled slot. Other layouts read into a
        staging tensor and scatter only verified pages."""
        keys = self._open_keys(keys)
        host_pages = check_pages(host_pool, host_pages, len(keys))
        if self.object_format.upstream:
            return upstream_io.get_pages(self, keys, host_pool, host_pages)
        return self._get_harness(keys, host_pool, host_pages)

    def register_host_pool(self, host_pool) -> None:
        """Register a host pool's memory with the backend so get/set move its pages with no copy where
        the backend can (Mooncake registered buffers); a no-op elsewhere. The pool must stay alive
        until `close()`."""
        if self._closed:
            raise ValueError(f"{self.name}: the storage client is closed")
        pages.check_pool(host_pool)
        self._register_host_pool(host_pool)

    def unregister_host_pool(self, host_pool) -> None:
        """Undo `register_host_pool` before the pool's memory is freed (a no-op where nothing was registered)."""
        if self._closed:
            return
        pages.check_pool(host_pool)
        self._unregister_host_pool(host_pool)

    def close(self) -> None:
        """Release the client (connections, registered buffers); idempotent. The store keeps its data."""
        if not self._closed:
            self._closed = True
            self._digests.closed = True  # what is submitted from now on runs on the caller
            try:
                self._close()
            finally:
                self._digests.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- helpers -----------------------------------------------------------------------
    def _open_keys(self, keys) -> list[str]:
        if self._closed:
            raise ValueError(f"{self.name}: the storage client is closed")
        return check_keys(keys)

    def _count(self, **fields) -> None:
        with self._stats_lock:
            for k, v in fields.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    def _write_counted(self, items, payload, trailer_ready=None) -> list[bool]:
        """`_write` `items` and count the outcomes; True per object stored. `payload`: the payload
        bytes of each object (one int for all, or one per item); a backend failure is an error
        per object, a full store's refusal (None) is `full`, not an error."""
        try:
            codes = list(self._write(items) if trailer_ready is None else self._write(items, trailer_ready))
        except Exception:  # noqa: BLE001 - any backend failure is an L3 error, never the caller's crash
            codes = [False] * len(items)
        if len(codes) != len(items):  # a backend answering for other objects than it was given
            codes = [False] * len(items)
        sizes = [payload] * len(items) if isinstance(payload, int) else list(payload)
        done = [bool(x) for x in codes]
        full = codes.count(None)
        self._count(objects_written=sum(done), bytes_written=sum(n for n, d in zip(sizes, done, strict=True) if d),
                    full=full, errors=done.count(False) - full)
        return done

    def _discard_quietly(self, key: str) -> None:
        try:
            self._discard(key)
        except Exception:  # noqa: BLE001 - a failed cleanup leaves a corrupt object, read as corrupt again
            self._count(errors=1)

    # ---- hooks -------------------------------------------------------------------------
    def _contains(self, key: str) -> bool:
        """Whether an object is stored under `key` (its integrity is checked on read, not here)."""
        raise NotImplementedError

    def _present(self, keys: list[str]) -> list[bool]:
        """Per key, whether an object is stored under it; the default asks `_contains` key by key."""
        return [self._contains(key) for key in keys]

    def _exists(self, keys: list[str]) -> int:
        """Length of the leading run present; the default asks `_contains` key by key."""
        for i, key in enumerate(keys):
            if not self._contains(key):
                return i
        return len(keys)

    def _write_one(self, key: str, segments: list[np.ndarray]) -> bool:
        """Store the bytes of `segments` under `key`: 2-D uint8 arrays whose rows are contiguous runs
        (views of the host pool, staging, the trailer), the object being every row in order
        (`rows(segments)`). An existing object may be replaced or kept (keys name content, so it
        holds the same page); a reader sees one whole object, never a mix or a part."""
        raise NotImplementedError

    def _write(self, items: list[tuple[str, list[np.ndarray]]], trailer_ready=None) -> list[bool | None]:
        """Batch `_write_one`; override to batch for real. Per item: True stored, False failed (an
        error), None not stored because the store is full and could not make room in time. A
        `late_trailer` backend takes `trailer_ready` too: call it with the item's index before
        writing the item's last segment, which holds its trailer only once that returns (here:
        before the item, which `_write_one` writes whole)."""
        out = []
        for i, (key, segs) in enumerate(items):
            if trailer_ready is not None:
                trailer_ready(i)
            out.append(self._write_one(key, segs))
        return out

    def _read_into(self, key: str, targets: list[np.ndarray]) -> int:
        """Fill `targets` (2-D uint8 arrays of contiguous rows, writable; filled row after row) with
        the object's bytes; return the object's size (which may differ from the targets' total: the
        base calls that corrupt), -1 when absent, None when the backend failed for this object
        (counted as an error)."""
        raise NotImplementedError

    def _read(self, items: list[tuple[str, list[np.ndarray]]]) -> list[int]:
        """Batch `_read_into`; override to batch for real."""
        return [self._read_into(key, targets) for key, targets in items]

    def _read_digested(self, items: list[tuple[str, list[np.ndarray]]]) -> list[tuple[int | None, bytes | None]]:
        """`_read` of objects in the harness's format, and per object the payload's digest where
        the backend took it while copying the payload into the targets (`integrity.copy_digest`:
        the trailer is checked against it and the targets are not read again), else None. The
        default: `_read`, no digests."""
        return [(size, None) for size in self._read(items)]

    def _discard(self, key: str) -> None:
        """Remove the object under `key` if there is one (called for an object found corrupt)."""

    def _register_host_pool(self, host_pool) -> None:
        """Make the pool's buffers usable for zero-copy transfers (default: nothing to do)."""

    def _unregister_host_pool(self, host_pool) -> None:
        """Forget the pool's buffers (default: nothing to do)."""

    def _close(self) -> None:
        """Release client resources."""
