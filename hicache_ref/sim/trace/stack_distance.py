"""LRU stack distances of a trace's pages in one pass (Mattson's method): every capacity's hit rate at once.

The tree caches page-aligned prefixes and touches a request's whole path, so over pages it is an
LRU stack; a page hits in a cache of C pages exactly when its distance is below C. The pass works
on runs of pages with consecutive distances, counted with a Fenwick tree. Why the curve is an upper
bound of a replay's: hicache_ref/README.md, "One-pass stack distances".
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hicache_ref.sim.trace.reader import BLOCK_TOKENS, TraceRequest


class StackProfile(NamedTuple):
    """The one-pass result over a trace at one page size (pages: `page_size` tokens)."""

    page_size: int
    input_tokens: int  # sum of input_length
    full_pages: np.ndarray  # per request: full pages (what an insert caches)
    seen_pages: np.ndarray  # per request: leading pages cached before it at unlimited capacity
    run_request: np.ndarray  # per run: the request it belongs to
    run_start: np.ndarray  # per run: stack distance (pages) of its shallowest page
    run_length: np.ndarray  # per run: pages in it (distances run_start .. run_start + length - 1)

    def hit_pages(self, capacity_pages) -> np.ndarray:
        """Hit pages over the whole trace of an LRU cache of each capacity (pages; array-like)."""
        c = np.asarray(capacity_pages, dtype=np.int64).reshape(-1, 1)
        return np.clip(c - self.run_start, 0, self.run_length).sum(axis=1)

    def hit_rate(self, capacity_tokens) -> np.ndarray:
        """Token hit rate at each capacity in tokens (rounded down to whole pages)."""
        pages = np.asarray(capacity_tokens, dtype=np.int64) // self.page_size
        return self.hit_pages(pages) * self.page_size / max(self.input_tokens, 1)

    def distances(self) -> np.ndarray:
        """Every reused page's stack distance in pages (one entry per page hit at unlimited capacity)."""
        if not len(self.run_length):
            return np.zeros(0, dtype=np.int64)
        starts = np.repeat(self.run_start - np.cumsum(self.run_length) + self.run_length, self.run_length)
        return starts + np.arange(int(self.run_length.sum()))


def _page_keys(requests: list[TraceRequest], page_size: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Per request, the dense id of each full page (equal ids: equal token prefixes)."""
    chains: dict[tuple[int, int], int] = {}  # (chain id of the blocks before, hash id) -> chain id
    keys, full = [], np.zeros(len(requests), dtype=np.int64)
    for i, r in enumerate(requests):
        chain, ids = 0, []
        for h in r.hash_ids:
            chain = chains.setdefault((chain, h), len(chains) + 1)
            ids.append(chain)
        f = r.input_length // page_size
        full[i] = f
        ends = (np.arange(1, f + 1, dtype=np.int64)) * page_size
        blocks = (ends - 1) // BLOCK_TOKENS
        # offsets lie in [1, 512]: 513 names each end within its block
        keys.append(np.asarray(ids, dtype=np.int64)[blocks] * (BLOCK_TOKENS + 1) + ends - blocks * BLOCK_TOKENS
                    if f else np.zeros(0, dtype=np.int64))
    if not keys:
        return [], full
    flat = np.concatenate(keys)
    _, dense = np.unique(flat, return_inverse=True)
    cuts = np.cumsum(full)[:-1]
    return np.split(dense.astype(np.int64), cuts), full


class _Fenwick:
    """Prefix sums over request numbers 1..n (live pages per request)."""

    def __init__(self, n: int):
        self.tree = [0] * (n + 1)
        self.total = 0

    def add(self, i: int, delta: int) -> None:
        self.total += delta
        i += 1
        tree = self.tree
        while i < len(tree):
            tree[i] += delta
            i += i & -i

    def upto(self, i: int) -> int:
        """Sum over requests 0..i."""
        s, i, tree = 0, i + 1, self.tree
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s


def stack_profile(requests: list[TraceRequest], page_size: int) -> StackProfile:
    """The one-pass stack distances of `requests` (in order) at `page_size` tokens per page."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0:
        raise ValueError(f"page_size: expected a positive integer, got {page_size!r}")
    pages, full = _page_keys(requests, page_size)
    n_pages = int(max((p.max() for p in pages if len(p)), default=-1)) + 1
    last = np.full(n_pages, -1, dtype=np.int64)  # request that last touched each page
    live = _Fenwick(len(requests))
    seen = np.zeros(len(requests), dtype=np.int64)
    run_req, run_start, run_len = [], [], []
    for r, p in enumerate(pages):
        if not len(p):
            continue
        owners = last[p]
        m = int(np.count_nonzero(owners >= 0))  # prefix-closed: seen pages lead the path
        seen[r] = m
        if m:
            cut = np.flatnonzero(owners[1:m] != owners[: m - 1]) + 1
            bounds = np.concatenate(([0], cut, [m]))
            runs = [(int(owners[a]), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
            for q, length in runs:  # distances before this request's moves
                run_req.append(r)
                run_start.append(live.total - live.upto(q))
                run_len.append(length)
            for q, length in runs:
                live.add(q, -length)
        last[p] = r
        live.add(r, len(p))
    as_array = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    return StackProfile(page_size, int(sum(r.input_length for r in requests)), full, seen,
                        as_array(run_req), as_array(run_start), as_array(run_len))
