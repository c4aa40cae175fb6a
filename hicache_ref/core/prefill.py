"""One prefill's steps on the radix tree, shared by every request path (core/cache.py's HiCache,
tp/rank_cache.py's RankCache): load back the match's host-only tail, take device pages for the
rest, then insert what is cached and free the pages past it.

The caller moves the bytes between the steps (the load's H2D, the new pages' KV); the tree
decides. `Prefill.admit` calls `on_load(copy)` between the load-back and the allocation, so a
load is submitted before the allocation's evictions queue their write-backs, as upstream does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hicache_ref.core.node import NO_PAGES, PageMatch, TierCopy


class Prefill:
    """The tree side of one prefill of `n_tokens` tokens whose match is `match`."""

    def __init__(self, tree, match: PageMatch, n_tokens: int):
        self.tree, self.match, self.n = tree, match, n_tokens
        self.ps = tree.page_size
        self.l1 = len(match.device_pages) * self.ps  # tokens hit in L1
        self.load: TierCopy | None = None  # the host-only tail given device pages again (H2D owed)
        self.loaded = NO_PAGES  # its device pages
        self.unloaded = 0  # host-cached tokens not loaded back (recomputed)
        self.new_pages = NO_PAGES

    def admit(self, min_load_tokens: int = 0, load_quota: int | None = None,
              on_load: Callable[[TierCopy], None] | None = None) -> None:
        """Load back the host tail (all or nothing: TierMoves.load_back), hand the copy to
        `on_load`, then take device pages for the rest (fewer when L1 cannot make room)."""
        tree, m, ps = self.tree, self.match, self.ps
        if len(m.host_pages):
            self.load = tree.tiers.load_back(m, min_load_tokens, load_quota)
            if self.load is None:
                self.unloaded = len(m.host_pages) * ps
            else:
                self.loaded = self.load.device_pages
                if on_load is not None:
                    on_load(self.load)
        self.new_pages = tree.take_device_pages(self.need_pages, self.n - self.prefix)

    @property
    def prefix(self) -> int:
        """Tokens cached before the new pages: the L1 hit and what was loaded back."""
        return self.l1 + len(self.loaded) * self.ps

    @property
    def need_pages(self) -> int:
        return -(-self.n // self.ps) - self.prefix // self.ps

    @property
    def truncated(self) -> bool:
        return len(self.new_pages) < self.need_pages

    @property
    def cached_len(self) -> int:
        """Page-aligned tokens the tree holds for the request once inserted."""
        return min(self.n // self.ps * self.ps, self.prefix + len(self.new_pages) * self.ps)

    @property
    def kept(self) -> int:
        """New pages the insert takes (the rest hold the live partial page, or did not fit)."""
        return (self.cached_len - self.prefix) // self.ps

    @property
    def pages(self) -> np.ndarray:
        """The device pages of the cached prefix, in token order."""
        return np.concatenate([self.match.device_pages, self.loaded, self.new_pages[: self.kept]])

    def insert(self, tokens, **insert_kw):
        """Insert the cached prefix of `tokens` (RadixTree.insert_pages); None when nothing is cached."""
        if self.cached_len <= 0:
            return None
        return self.tree.insert_pages(tokens[: self.cached_len], self.pages, **insert_kw)

    def release(self) -> None:
        """Free the new pages the insert did not take."""
        if len(self.new_pages) > self.kept:
            self.tree.device.free_pages(self.new_pages[self.kept:])
