"""The arguments of one storage batch, checked once before any object moves: its keys and the
host-pool pages they go to or come from.

A bad argument is a ValueError naming it (the first bad key by its index), raised before the
backend is called, so no store ever holds half of a refused batch.
"""

from __future__ import annotations

import torch

from hicache_ref.storage import pages

MAX_KEY_CHARS = 512


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
    """`host_pages` as a list of distinct page numbers of `host_pool`, one per key of a batch of `count`."""
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
