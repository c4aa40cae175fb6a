"""The L3 storage contract: batch exists / get / set of whole host-pool pages, with integrity.

`exists` answers with the length of the leading run of keys present, as upstream HiCache storage
does. In the harness's object format (hicache_ref.storage.objects) every object is the page in
canonical byte order plus a digest trailer, checked here once for every backend: a corrupt object
is counted and discarded, never returned as KV; upstream SGLang's format goes through
hicache_ref.storage.upstream_io. Backends fill the
underscore hooks; public methods validate, count errors and keep the stats, and overlap the
integrity pass of one chunk with the transfer of the next (a set on a `late_trailer` backend: with
the write of the same chunk, the trailer written last).
"""

from __future__ import annotations

import inspect
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import torch

from hicache_ref.storage import integrity, objects, pages, upstream_io
from hicache_ref.storage.integrity import TRAILER_BYTES
from hicache_ref.storage.staging_buffers import STAGING_KEEP_BYTES, StagingPool  # noqa: F401 - re-exported

MAX_KEY_CHARS = 512
# Pages go to the backend in chunks of about this many bytes: the unit of overlap between the
# backend (chunk i) and the worker's digest (chunk i +/- 1). Two seed pages (5.5 MiB each) a chunk
# measured no worse on the file backend than one (a thread handoff per page) or a whole batch (no
# overlap), and better for layer_first set; see BENCHMARKS.md, bench l3.
CHUNK_BYTES = 12 << 20


def _chunks(count: int, page_bytes: int, chunk_bytes: int = CHUNK_BYTES):
    step = max(1, chunk_bytes // max(1, page_bytes)) if chunk_bytes else max(1, count)
    for lo in range(0, count, step):
        yield lo, min(count, lo + step)


def _mark_worker(local: threading.local) -> None:
    local.yes = True


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


def rows(segments) -> list[np.ndarray]:
    """The 1-D contiguous runs of hook `segments` (2-D uint8 arrays), in object order."""
    return [row for seg in segments for row in seg]


def check_keys(keys, name: str = "keys") -> list[str]:
    if isinstance(keys, str | bytes) or not hasattr(keys, "__iter__"):
        raise ValueError(f"{name}: expected a list of strings, got {type(keys).__name__}")
    keys = list(keys)
    # one pass in C over the batch (a model L3 checks every page key of every lookup and write);
    # any doubt goes to the per-key loop below, which names the first bad key
    if all(type(k) is str for k in keys) and (not keys or (
            0 < min(map(len, keys)) and max(map(len, keys)) <= MAX_KEY_CHARS)):
        joined = "".join(keys)
        if joined.isprintable() and " " not in joined:
            return keys
    for i, k in enumerate(keys):
        if not isinstance(k, str) or not k or len(k) > MAX_KEY_CHARS or not k.isprintable() or " " in k:
            raise ValueError(f"{name}[{i}]: expected a non-empty printable string without spaces of at most "
                             f"{MAX_KEY_CHARS} characters, got {k!r:.60}")
    return keys


def check_pages(host_pool, host_pages, count: int) -> list[int]:
    pages.check_pool(host_pool)
    if isinstance(host_pages, torch.Tensor):
        host_pages = host_pages.tolist()
    host_pages = list(host_pages)
    if len(host_pages) != count:
        raise ValueError(f"host_pages: {len(host_pages)} pages for {count} keys")
    limit = host_pool.num_tokens // host_pool.geom.page_size
    out = []
    for i, p in enumerate(host_pages):
        if isinstance(p, bool) or not hasattr(p, "__index__") or not 0 <= int(p) < limit:
            raise ValueError(f"host_pages[{i}]: expected a page number in [0, {limit}), got {p!r}")
        out.append(int(p))
    if len(set(out)) != len(out):
        raise ValueError("host_pages: a page appears twice in one batch")
    return out


class StorageBackend:
    """One client of an L3 store. Subclasses fill `_contains`, `_write_one`, `_read_into`, `_close`
    (and may override the batch hooks `_exists`, `_write`, `_read` to batch for real)."""

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
        self._worker: ThreadPoolExecutor | None = None  # digests and verifies beside the backend's I/O
        self._worker_lock = threading.Lock()
        self._on_worker = threading.local()  # .yes on the worker's own thread
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
        payload = pages.page_bytes(host_pool.geom)
        spans = self._spans("set", len(keys), payload)
        if self._trailer_last(host_pool):
            return self._set_trailer_last(keys, host_pool, host_pages, spans)
        done: list[bool] = []
        pending = self._inline(self._sealed, keys, host_pool, host_pages, *spans[0]) if spans else None
        try:
            for i, (lo, hi) in enumerate(spans):
                current, pending = pending, None
                if i + 1 < len(spans):  # digest the next chunk while this one is written
                    pending = self._submit(self._sealed, keys, host_pool, host_pages, *spans[i + 1])
                try:
                    items, lease = current.result()
                except Exception:  # noqa: BLE001 - a failed seal fails its chunk's objects, as a failed write does
                    self._count(errors=hi - lo)
                    done += [False] * (hi - lo)
                    continue
                try:
                    done += self._write_counted(items, payload)
                finally:
                    self.staging.give(lease)
        finally:
            if pending is not None:  # something escaped: the worker's staging goes back once it is done
                pending.add_done_callback(lambda f: f.exception() or self.staging.give(f.result()[1]))
        return done

    def _trailer_last(self, host_pool) -> bool:
        """Whether a set takes `_set_trailer_last`: a `late_trailer` backend whose `_write` takes
        `trailer_ready`, on pages that are runs of the pool (staged pages take the chunked path,
        which holds two chunks' staging at most, not the batch's)."""
        if not self.late_trailer or pages.run_pager(host_pool) is None:
            return False
        params = inspect.signature(self._write).parameters.values()
        return any(p.name == "trailer_ready" or p.kind is p.VAR_KEYWORD for p in params)

    def _set_trailer_last(self, keys, host_pool, host_pages, spans) -> list[bool]:
        """`set` where the backend writes each object's trailer after its payload: the worker seals
        a chunk while the backend writes it, so a page's digest reads it beside the write instead
        of before it, and no chunk's digest waits unoverlapped. One chunk is sealed ahead, as in
        the chunked path, so a get's verify on the same worker waits behind two chunks at most."""
        lease: list = []
        jobs: list[Future] = []
        payload = pages.page_bytes(host_pool.geom)
        try:
            batch = self._page_runs(keys, host_pool, host_pages, lease)
            tails = [np.empty((1, TRAILER_BYTES), dtype=np.uint8) for _ in batch]
            items = [(key, [*runs, tail]) for (key, _, runs), tail in zip(batch, tails, strict=True)]
            done: list[bool] = []
            for c, (lo, hi) in enumerate(spans):
                for lo_, hi_ in spans[len(jobs) : c + 2]:
                    jobs.append(self._submit(self._seal, batch[lo_:hi_], tails[lo_:hi_], host_pool))
                job = jobs[c]
                done += self._write_counted(items[lo:hi], payload, lambda _, job=job: job.result())
            return done
        finally:
            for job in jobs:  # the worker is done with the pool's pages before the caller reuses them
                job.exception()
            self.staging.give(lease)

    def _page_runs(self, keys, host_pool, host_pages, lease) -> list:
        """(key, page, runs) per page: views of the pool, or gathers into staging taken on `lease`."""
        pager = pages.run_pager(host_pool)
        return [(key, page, pages.page_runs(host_pool, page, lambda n: self.staging.take(n, lease), pager))
                for key, page in zip(keys, host_pages, strict=True)]

    def _seal(self, batch, tails, host_pool) -> None:
        """Fill `tails` (a (1, 48) uint8 array per (key, page, runs) of `batch`) with the trailers."""
        sealed = getattr(host_pool, "trailer", None)  # l3 staging seals while it copies
        seals = [sealed(key, page, self.digest) if sealed is not None else None for key, page, _ in batch]
        unsealed = [i for i, seal in enumerate(seals) if seal is None]
        for i, seal in zip(unsealed, integrity.trailers(self.digest, [(batch[i][0], batch[i][2]) for i in unsealed]),
                           strict=True):
            seals[i] = seal
        for tail, seal in zip(tails, seals, strict=True):
            tail[0] = np.frombuffer(seal, dtype=np.uint8)

    def _sealed(self, keys, host_pool, host_pages, lo: int, hi: int):
        """(items, staging lease) for pages [lo, hi): each page's runs and its trailer."""
        lease: list = []
        try:
            batch = self._page_runs(keys[lo:hi], host_pool, host_pages[lo:hi], lease)
            tails = [np.empty((1, TRAILER_BYTES), dtype=np.uint8) for _ in batch]
            self._seal(batch, tails, host_pool)
        except BaseException:  # the staging taken so far goes back
            self.staging.give(lease)
            raise
        return [(key, [*runs, tail]) for (key, _, runs), tail in zip(batch, tails, strict=True)], lease

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
        out: list[bool] = []
        spans = self._spans("get", len(keys), pages.page_bytes(host_pool.geom))
        previous = pending = None
        try:
            for i, (lo, hi) in enumerate(spans):
                fetched = self._fetch(keys[lo:hi], host_pool, host_pages[lo:hi])
                previous, pending, mine = pending, None, []
                if i + 1 < len(spans):  # verified on the worker while the next chunk is read
                    pending = self._submit(self._verify, host_pool, *fetched)
                else:  # nothing left to overlap with: verify here rather than wait for the worker
                    mine = self._verify(host_pool, *fetched)
                if previous is not None:
                    out += previous.result()
                out += mine
        finally:
            for job in (previous, pending):  # the worker is done with the pool pages before we return
                if job is not None:
                    job.exception()
        return out

    def _fetch(self, keys, host_pool, host_pages):
        """Read pages into their slots (or staging); (items, plans, reads or None on a failure, lease),
        a read being (size, the payload's digest where the backend took it in its copy, else None)."""
        payload = pages.page_bytes(host_pool.geom)
        lease: list = []
        items, plans = [], []
        pager = pages.run_pager(host_pool)
        for key, page in zip(keys, host_pages, strict=True):
            direct = pager(page) if pager is not None else None
            targets = direct if direct is not None else [self.staging.take(payload, lease).numpy().reshape(1, -1)]
            items.append((key, [*targets, np.empty((1, TRAILER_BYTES), dtype=np.uint8)]))
            plans.append((page, direct is None))
        try:
            reads = list(self._read_digested(items))
        except Exception:  # noqa: BLE001
            reads = None
        return items, plans, reads, lease

    def _verify(self, host_pool, items, plans, reads, lease) -> list[bool]:
        try:
            return self._verified(host_pool, items, plans, reads)
        finally:
            self.staging.give(lease)

    def _verified(self, host_pool, items, plans, reads) -> list[bool]:
        if reads is None:
            self._count(errors=len(items))
            return [False] * len(items)
        payload = pages.page_bytes(host_pool.geom)
        out, counts = [], {"misses": 0, "corrupt": 0, "objects_read": 0, "errors": 0}
        for (key, segs), (page, staged), (size, copied) in zip(items, plans, reads, strict=True):
            if size is None:
                counts["errors"] += 1
                out.append(False)
                continue
            if size < 0:
                counts["misses"] += 1
                out.append(False)
                continue
            if not integrity.verified(key, segs[:-1], segs[-1].tobytes(), size, payload, copied):
                counts["corrupt"] += 1
                out.append(False)
                self._discard_quietly(key)
                continue
            if staged:
                pages.write_page(host_pool, page, torch.from_numpy(segs[0].reshape(-1)))
            counts["objects_read"] += 1
            out.append(True)
        self._count(bytes_read=payload * counts["objects_read"], **counts)
        return out

    def _spans(self, op: str, count: int, page_bytes: int) -> list[tuple[int, int]]:
        """The chunks [lo, hi) a batch of `count` pages goes to the backend in, for `op` "set" or
        "get": by default `set_chunk_bytes` / `get_chunk_bytes` each (0: the batch whole)."""
        return list(_chunks(count, page_bytes, self.set_chunk_bytes if op == "set" else self.get_chunk_bytes))

    def _submit(self, fn, *args) -> Future:
        """Run `fn(*args)` on this client's worker thread (started on first use); here instead when
        called on the worker (which would wait on itself) or once the client is closed (no new
        worker outlives `close`)."""
        with self._worker_lock:
            if self._closed or getattr(self._on_worker, "yes", False):
                return self._inline(fn, *args)
            if self._worker is None:
                # the initializer holds the thread-local, not this client: a client dropped unclosed
                # frees its executor at once, and the worker thread ends with it
                self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"hicache-{self.name}-digest",
                                                  initializer=_mark_worker, initargs=(self._on_worker,))
            return self._worker.submit(fn, *args)

    @staticmethod
    def _inline(fn, *args) -> Future:
        """`fn(*args)` run here, as a done Future (an Exception kept in it, as the worker keeps one)."""
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except Exception as e:  # noqa: BLE001 - handed to whoever takes the result
            done.set_exception(e)
        return done

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
            try:
                self._close()
            finally:
                with self._worker_lock:
                    worker, self._worker = self._worker, None
                if worker is not None:
                    worker.shutdown(wait=True)

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
