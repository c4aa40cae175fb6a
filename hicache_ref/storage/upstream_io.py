"""exists / set / get of whole pages as upstream SGLang's objects (hicache_ref.storage.objects).

A page is one or more objects (the backend's `upstream_objects`), each some of the page's parts in
the format's byte order. Set skips objects already stored, as upstream's clients do; a page is
present, written or read when all of its objects are. Read: an object of exactly the parts' size
has no trailer and is counted unverified; one a trailer longer is checked against it when the
format has trailers (else counted an error and kept); any other size is corrupt (counted and
discarded).
"""

from __future__ import annotations

import numpy as np

from hicache_ref.storage import integrity, pages
from hicache_ref.storage.integrity import TRAILER_BYTES


def _objects(backend, keys):
    """Per page, its objects: [(name, parts)]."""
    fmt, parts = backend.object_format, backend.object_parts
    return [backend.upstream_objects(fmt, key, parts) for key in keys]


def exists(backend, keys) -> int:
    """Length of the leading run of pages all of whose objects are present."""
    per_page = _objects(backend, keys)
    present = iter(backend._present([name for objs in per_page for name, _ in objs]))
    for i, objs in enumerate(per_page):
        if not all([next(present) for _ in objs]):
            return i
    return len(keys)


def set_pages(backend, keys, pool, host_pages) -> list[bool]:
    """Write the pages' objects not already stored; True per page whose objects are all stored."""
    fmt = backend.object_format
    per_page = _objects(backend, keys)
    present = backend._present([name for objs in per_page for name, _ in objs])
    lease: list = []
    take = lambda n: backend.staging.take(n, lease)  # noqa: E731
    it = iter(present)
    missing = [(i, name, parts) for i, objs in enumerate(per_page) for name, parts in objs if not next(it)]
    items, owner = [], []
    ok = [True] * len(keys)
    try:
        # each part of every missing object's page in one pass over the batch (views or one gather)
        gathered = {p: iter(pages.gather_ordered_pages(pool, p, [host_pages[i] for i, _, parts in missing
                                                                 if p in parts], fmt.order, take))
                    for p in sorted({p for _, _, parts in missing for p in parts})}
        for i, name, parts in missing:
            items.append((name, [next(gathered[p]) for p in parts]))
            owner.append((i, len(parts)))
        if fmt.trailer:  # every object's trailer in one pass of the copy engine
            for (_, segs), tail in zip(items, integrity.trailers(backend.digest, items), strict=True):
                segs.append(np.frombuffer(tail, dtype=np.uint8).reshape(1, -1))
        if items:
            part = pages.part_bytes(pool.geom)
            done = backend._write_counted(items, [part * n for _, n in owner])
            for (i, _), d in zip(owner, done, strict=True):
                ok[i] = ok[i] and d
    finally:
        backend.staging.give(lease)
    return ok


def get_pages(backend, keys, pool, host_pages) -> list[bool]:
    """Read the pages' objects into `host_pages`; True per page whose objects all read whole.
    A page's staged parts are scattered into the pool only once all of them have read."""
    fmt, geom = backend.object_format, pool.geom
    part = pages.part_bytes(geom)
    per_page = _objects(backend, keys)
    lease: list = []
    items, plan = [], []  # plan per object: (page index, [(part, staged array or None)])
    try:
        for i, (objs, page) in enumerate(zip(per_page, host_pages, strict=True)):
            for name, parts in objs:
                targets, staged = [], []
                for p in parts:
                    view = pages.ordered_view(pool, p, page, fmt.order)
                    if view is None:
                        view = backend.staging.take(part, lease).numpy().reshape(1, -1)
                        staged.append((p, view))
                    targets.append(view)
                if fmt.trailer:  # a slot for it (Mooncake fills nothing when the buffers exceed the object)
                    targets.append(np.empty((1, TRAILER_BYTES), dtype=np.uint8))
                items.append((name, targets))
                plan.append((i, parts, staged))
        sizes = _read(backend, items)
        if fmt.trailer:  # objects without one (upstream's): read again into the parts alone
            again = [j for j, size in enumerate(sizes) if size == part * len(plan[j][1])]
            for j, size in zip(again, _read(backend, [(items[j][0], items[j][1][:-1]) for j in again]), strict=True):
                sizes[j] = size
        return _settle(backend, pool, host_pages, items, plan, sizes, part, len(keys))
    finally:
        backend.staging.give(lease)


def _read(backend, items) -> list:
    try:
        return list(backend._read(items))
    except Exception:  # noqa: BLE001 - any backend failure is an L3 error, never the caller's crash
        return [None] * len(items)


def _settle(backend, pool, host_pages, items, plan, sizes, part, count) -> list[bool]:
    fmt = backend.object_format
    ok, unverified = [True] * count, [False] * count
    counts = {"misses": 0, "corrupt": 0, "objects_read": 0, "errors": 0}
    for (name, targets), (i, parts, _), size in zip(items, plan, sizes, strict=True):
        payload = part * len(parts)
        if size is None:
            counts["errors"] += 1
        elif size < 0:
            counts["misses"] += 1
        elif size == payload:
            unverified[i] = True
            counts["objects_read"] += 1
            continue
        elif size == payload + TRAILER_BYTES and fmt.trailer and \
                integrity.verified(name, targets[:-1], targets[-1].tobytes(), size, payload):
            counts["objects_read"] += 1
            continue
        elif size == payload + TRAILER_BYTES and not fmt.trailer:
            counts["errors"] += 1  # a trailer-written object read with --l3-trailer off: not read, kept
        else:
            counts["corrupt"] += 1
            backend._discard_quietly(name)
        ok[i] = False
    for i, _parts, staged in plan:
        if ok[i]:
            for p, data in staged:
                pages.scatter_ordered(pool, p, host_pages[i], fmt.order, data)
    read = sum(ok)
    backend._count(bytes_read=read * part * pool.geom.parts,
                   unverified=sum(1 for i in range(count) if ok[i] and unverified[i]), **counts)
    return ok
