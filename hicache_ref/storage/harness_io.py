"""Pages to and from objects in the harness's format, the integrity pass overlapped with the transfer.

A batch goes to the backend in chunks of about CHUNK_BYTES. A set seals (digests) chunk i + 1 on
the client's digest worker while the backend writes chunk i; on a `late_trailer` backend it seals
each chunk while the backend writes that chunk's payload, the trailer written last. A get verifies
chunk i on the worker while the backend reads chunk i + 1, and the last chunk on the caller. A
corrupt object is counted and discarded, never returned as KV.

`HarnessObjectIO` holds these steps as methods of the storage client (hicache_ref.storage.base
mixes it in): each step is a hook a backend may override (`_spans`) or a benchmark may time on one
instance (`_seal`, `_verify`), and each uses the client's hooks, staging, digest worker and counters.
"""

from __future__ import annotations

import inspect
from concurrent.futures import Future

import numpy as np
import torch

from hicache_ref.storage import integrity, pages
from hicache_ref.storage.integrity import TRAILER_BYTES

# Pages go to the backend in chunks of about this many bytes: the unit of overlap between the
# backend (chunk i) and the worker's digest (chunk i +/- 1). Two seed pages (5.5 MiB each) a chunk
# measured no worse on the file backend than one (a thread handoff per page) or a whole batch (no
# overlap), and better for layer_first set; see BENCHMARKS.md, bench l3.
CHUNK_BYTES = 12 << 20


def _chunks(count: int, page_bytes: int, chunk_bytes: int = CHUNK_BYTES):
    step = max(1, chunk_bytes // max(1, page_bytes)) if chunk_bytes else max(1, count)
    for lo in range(0, count, step):
        yield lo, min(count, lo + step)


class HarnessObjectIO:
    """The set and get of a storage client for objects in the harness's format (page + trailer)."""

    def _set_harness(self, keys: list[str], host_pool, host_pages: list[int]) -> list[bool]:
        """`set` of checked `keys` and `host_pages` as the harness's objects; True per page stored."""
        payload = pages.page_bytes(host_pool.geom)
        spans = self._spans("set", len(keys), payload)
        if self._trailer_last(host_pool):
            return self._set_trailer_last(keys, host_pool, host_pages, spans)
        done: list[bool] = []
        pending = self._digests.inline(self._sealed, keys, host_pool, host_pages, *spans[0]) if spans else None
        try:
            for i, (lo, hi) in enumerate(spans):
                current, pending = pending, None
                if i + 1 < len(spans):  # digest the next chunk while this one is written
                    pending = self._digests.submit(self._sealed, keys, host_pool, host_pages, *spans[i + 1])
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
                    jobs.append(self._digests.submit(self._seal, batch[lo_:hi_], tails[lo_:hi_], host_pool))
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


    def _get_harness(self, keys: list[str], host_pool, host_pages: list[int]) -> list[bool]:
        """`get` of checked `keys` into `host_pages` from the harness's objects; True per page read
        and verified."""
        out: list[bool] = []
        spans = self._spans("get", len(keys), pages.page_bytes(host_pool.geom))
        previous = pending = None
        try:
            for i, (lo, hi) in enumerate(spans):
                fetched = self._fetch(keys[lo:hi], host_pool, host_pages[lo:hi])
                previous, pending, mine = pending, None, []
                if i + 1 < len(spans):  # verified on the worker while the next chunk is read
                    pending = self._digests.submit(self._verify, host_pool, *fetched)
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
