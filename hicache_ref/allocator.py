"""Whole-page allocator for KV token slots, and page <-> slot conversion.

A pool of `num_tokens` token slots is cut into pages of `page_size` slots; page p owns
slots [p*page_size, (p+1)*page_size). The allocator hands out whole pages only, so token
slot indices are always page-aligned runs, and it can keep its bookkeeping per page
(the free list of a 145M-token pool is 2.3M integers, not 145M).

Order of the free list:
- "fifo" (upstream's behaviour): freed pages go to the back, allocation takes from the
  front, so a freed page is reused as late as possible.
- "lifo" (the seed's): allocation takes the most recently freed page first, so writes
  concentrate on a hot set of pages.

SPMD determinism: the free list is an index array mutated only by alloc/free in call
order; nothing depends on ids, addresses, time, threads or hash ordering, so the same
sequence of calls gives the same indices on every rank.
"""

from __future__ import annotations

import numpy as np

ORDERS = ("fifo", "lifo")


def has_duplicates(pages: np.ndarray) -> bool:
    if len(pages) < 2 or (pages[1:] > pages[:-1]).all():  # ascending, as fresh pages mostly are: no sort
        return False
    return bool((np.diff(np.sort(pages)) == 0).any())


_OFFSETS: dict[int, np.ndarray] = {}


def _offsets(page_size: int) -> np.ndarray:
    """[0, page_size) as int64, made once per page size (the hot paths call this per request)."""
    ar = _OFFSETS.get(page_size)
    if ar is None:
        ar = _OFFSETS[page_size] = np.arange(page_size, dtype=np.int64)
        ar.flags.writeable = False
    return ar


def pages_to_slots(pages: np.ndarray, page_size: int) -> np.ndarray:
    """Token slot indices (int64) of whole pages, in page order."""
    pages = np.asarray(pages, dtype=np.int64)
    if page_size == 1:
        return pages.copy()
    return (pages[:, None] * page_size + _offsets(page_size)[None, :]).reshape(-1)


def slots_to_pages(slots, page_size: int, name: str = "indices") -> np.ndarray:
    """Page numbers of page-aligned whole-page slot runs; ValueError naming `name` otherwise."""
    slots = np.asarray(slots)
    if slots.ndim != 1 or (slots.dtype != np.int64 and slots.size and not np.issubdtype(slots.dtype, np.integer)):
        raise ValueError(f"{name}: expected a 1-D integer array, got shape {slots.shape} dtype {slots.dtype}")
    if len(slots) % page_size:
        raise ValueError(f"{name}: length {len(slots)} is not a multiple of page_size {page_size}")
    slots = slots.astype(np.int64, copy=False)
    if page_size == 1:
        return slots.copy()
    grid = slots.reshape(-1, page_size)
    first = grid[:, 0]
    if (first % page_size).any() or (grid != first[:, None] + _offsets(page_size)).any():
        raise ValueError(f"{name}: not whole page-aligned pages of {page_size} slots")
    return first // page_size


class PageAllocator:
    """Allocates whole pages of token slots; detects double allocation and double free."""

    def __init__(self, num_tokens: int, page_size: int, order: str = "fifo"):
        if not isinstance(page_size, int) or page_size <= 0:
            raise ValueError(f"page_size: must be a positive integer, got {page_size!r}")
        if not isinstance(num_tokens, int) or num_tokens < 0 or num_tokens % page_size:
            raise ValueError(f"num_tokens: must be a non-negative multiple of page_size {page_size}, got {num_tokens!r}")
        if order not in ORDERS:
            raise ValueError(f"order: {order!r} is not one of {', '.join(ORDERS)}")
        self.num_tokens = num_tokens
        self.page_size = page_size
        self.order = order
        self.num_pages = num_tokens // page_size
        # The free list is a ring (fifo) or a stack (lifo) over one fixed array: at most
        # num_pages pages are ever free, so it never grows.
        self._ring = np.arange(self.num_pages, dtype=np.int64)
        if order == "lifo":  # top of the stack is the array's end: a fresh pool still hands out 0, 1, 2...
            self._ring = self._ring[::-1].copy()
        self._head = 0  # fifo: position of the oldest free page
        self._free = self.num_pages
        self._allocated = np.zeros(self.num_pages, dtype=bool)

    # -- sizes -----------------------------------------------------------------
    @property
    def available_pages(self) -> int:
        return self._free

    @property
    def available_tokens(self) -> int:
        return self._free * self.page_size

    @property
    def used_tokens(self) -> int:
        return (self.num_pages - self._free) * self.page_size

    # -- page API (what the radix tree uses) --------------------------------------
    def alloc_pages(self, n_pages: int) -> np.ndarray | None:
        if not isinstance(n_pages, (int, np.integer)) or n_pages < 0:
            raise ValueError(f"n_pages: must be a non-negative integer, got {n_pages!r}")
        n = int(n_pages)
        if n > self._free:
            return None
        cap = self.num_pages
        if self.order == "fifo":
            pos = (self._head + np.arange(n)) % cap if n else np.zeros(0, dtype=np.int64)
            pages = self._ring[pos]
            self._head = (self._head + n) % cap if cap else 0
        else:  # lifo: top of the stack first
            pages = self._ring[self._free - n : self._free][::-1].copy()
        if self._allocated[pages].any() or has_duplicates(pages):
            # Only a corrupted free list gets here; refuse rather than hand a slot out twice.
            raise RuntimeError(f"double allocation of pages {pages[self._allocated[pages]].tolist()[:8]}")
        self._free -= n
        self._allocated[pages] = True
        return pages

    def free_pages(self, pages) -> None:
        pages = np.asarray(pages, dtype=np.int64).reshape(-1)
        if not len(pages):
            return
        if pages.min() < 0 or pages.max() >= self.num_pages:
            raise ValueError(f"indices: page outside this pool of {self.num_pages} pages")
        if has_duplicates(pages):
            raise ValueError("indices: the same page is freed twice in one call")
        if not self._allocated[pages].all():
            raise ValueError(f"indices: double free of pages {pages[~self._allocated[pages]].tolist()[:8]}")
        n, cap = len(pages), self.num_pages
        if self.order == "fifo":
            pos = (self._head + self._free + np.arange(n)) % cap
            self._ring[pos] = pages
        else:
            self._ring[self._free : self._free + n] = pages
        self._free += n
        self._allocated[pages] = False

    # -- token-slot API (upstream's interface) -----------------------------------
    def alloc(self, n_tokens: int) -> np.ndarray | None:
        """`n_tokens` page-aligned slots (int64), or None when not enough pages are free."""
        if not isinstance(n_tokens, (int, np.integer)) or n_tokens < 0 or n_tokens % self.page_size:
            raise ValueError(f"n_tokens: must be a non-negative multiple of page_size {self.page_size}, got {n_tokens!r}")
        pages = self.alloc_pages(int(n_tokens) // self.page_size)
        return None if pages is None else pages_to_slots(pages, self.page_size)

    def free(self, indices) -> None:
        """Return whole pages; a double free or a foreign slot raises ValueError, changing nothing."""
        self.free_pages(slots_to_pages(indices, self.page_size))

    def is_allocated(self, indices) -> np.ndarray:
        """Per page of `indices`: is it allocated?"""
        return self._allocated[slots_to_pages(indices, self.page_size)]

    def pages_allocated(self, pages: np.ndarray) -> bool:
        """Are all these page numbers in range and allocated?"""
        pages = np.asarray(pages, dtype=np.int64)
        if not len(pages):
            return True
        if pages.min() < 0 or pages.max() >= self.num_pages:
            return False
        return bool(self._allocated[pages].all())

    def free_page_list(self) -> np.ndarray:
        """Free pages in the order they would be handed out (for tests and reports)."""
        if self.order == "fifo":
            return self._ring[(self._head + np.arange(self._free)) % max(self.num_pages, 1)]
        return self._ring[: self._free][::-1].copy()
