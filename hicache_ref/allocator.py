"""Whole-page allocator for KV token slots, and page <-> slot conversion.

A pool of `num_tokens` token slots is cut into pages of `page_size` slots; page p owns
slots [p*page_size, (p+1)*page_size). The allocator hands out whole pages only, so token
slot indices are always page-aligned runs, and it can keep its bookkeeping per page
(the free list of a 145M-token pool is at most 2.3M integers, not 145M, and only as many
as pages were freed).

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
    """Allocates whole pages of token slots; detects double allocation and double free.

    Bookkeeping grows with use, not with capacity (a 50G-token pool that a trace fills to 1%
    must not cost 6 GB of free list): pages [fresh, num_pages) were never handed out and are
    kept as that one number, and only pages freed since are stored. The order is the same as
    one free list over every page would give: fifo hands out never-used pages before any
    freed page (they were queued first), lifo hands out the last freed pages first and then
    never-used pages in ascending order.
    """

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
        self._fresh = 0  # pages [_fresh, num_pages) were never handed out
        # Pages freed since they were handed out: a ring (fifo; _head is the oldest) or a
        # stack (lifo; the top is _count - 1), grown by doubling, never past num_pages.
        self._recycled = np.zeros(0, dtype=np.int64)
        self._head = 0
        self._count = 0
        self._free = self.num_pages
        self._allocated = np.zeros(0, dtype=bool)  # per page below _fresh (grown with it)

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
        if self.order == "fifo":  # never-used pages were queued before any freed one
            fresh = min(n, self.num_pages - self._fresh)
            reused = n - fresh
            pages = np.arange(self._fresh, self._fresh + fresh, dtype=np.int64)
            if reused:
                old = self._recycled[(self._head + np.arange(reused)) % len(self._recycled)]
                pages = np.concatenate([pages, old]) if fresh else old
        else:  # lifo: the stack's top first, then never-used pages from the lowest
            reused = min(n, self._count)
            fresh = n - reused
            pages = self._recycled[self._count - reused : self._count][::-1].copy()
            if fresh:
                new = np.arange(self._fresh, self._fresh + fresh, dtype=np.int64)
                pages = np.concatenate([pages, new]) if reused else new
        if self._fresh + fresh > len(self._allocated):  # all False: no state change yet
            self._allocated = self._grown(self._allocated, self._fresh + fresh)
        if self._allocated[pages].any() or has_duplicates(pages):
            # Only a corrupted free list gets here; refuse rather than hand a slot out twice.
            raise RuntimeError(f"double allocation of pages {pages[self._allocated[pages]].tolist()[:8]}")
        if self.order == "fifo" and reused:
            self._head = (self._head + reused) % len(self._recycled)
        self._count -= reused
        self._fresh += fresh
        self._free -= n
        self._allocated[pages] = True
        return pages

    def free_pages(self, pages) -> None:
        pages = np.asarray(pages, dtype=np.int64).reshape(-1)
        if not len(pages):
            return
        top = pages.max()
        if pages.min() < 0 or top >= self.num_pages:
            raise ValueError(f"indices: page outside this pool of {self.num_pages} pages")
        if has_duplicates(pages):
            raise ValueError("indices: the same page is freed twice in one call")
        held = self._allocated[pages] if top < len(self._allocated) else self._is_allocated(pages)
        if not held.all():
            raise ValueError(f"indices: double free of pages {pages[~held].tolist()[:8]}")
        n = len(pages)
        if self._count + n > len(self._recycled):
            self._unroll_and_grow(self._count + n)
        if self.order == "fifo":
            self._recycled[(self._head + self._count + np.arange(n)) % len(self._recycled)] = pages
        else:
            self._recycled[self._count : self._count + n] = pages
        self._count += n
        self._free += n
        self._allocated[pages] = False

    def _is_allocated(self, pages: np.ndarray) -> np.ndarray:
        """Per page (in range): allocated? Pages at or past the high-water mark never were."""
        if not len(pages) or pages.max() < len(self._allocated):
            return self._allocated[pages]
        inside = pages < len(self._allocated)
        held = np.zeros(len(pages), dtype=bool)
        held[inside] = self._allocated[pages[inside]]
        return held

    def _grown(self, array: np.ndarray, need: int) -> np.ndarray:
        """`array` copied into one of at least `need` entries (doubling, at most num_pages)."""
        out = np.zeros(min(self.num_pages, max(need, 2 * len(array), 1024)), dtype=array.dtype)
        out[: len(array)] = array
        return out

    def _unroll_and_grow(self, need: int) -> None:
        """Room for `need` freed pages; a fifo ring is unrolled so its oldest page is at 0."""
        if self.order == "fifo" and self._count:
            live = self._recycled[(self._head + np.arange(self._count)) % len(self._recycled)]
        else:
            live = self._recycled[: self._count]
        self._recycled = self._grown(live, need)
        self._head = 0

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
        pages = slots_to_pages(indices, self.page_size)
        if len(pages) and (pages.min() < 0 or pages.max() >= self.num_pages):
            raise IndexError(f"indices: page outside this pool of {self.num_pages} pages")
        return self._is_allocated(pages)

    def pages_allocated(self, pages: np.ndarray) -> bool:
        """Are all these page numbers in range and allocated?"""
        pages = np.asarray(pages, dtype=np.int64)
        if not len(pages):
            return True
        if pages.min() < 0 or pages.max() >= self.num_pages:
            return False
        return bool(self._is_allocated(pages).all())

    def free_page_list(self) -> np.ndarray:
        """Free pages in the order they would be handed out (for tests and reports)."""
        never_used = np.arange(self._fresh, self.num_pages, dtype=np.int64)
        if self.order == "fifo":
            return np.concatenate([never_used, self._recycled[(self._head + np.arange(self._count))
                                                              % max(len(self._recycled), 1)]])
        return np.concatenate([self._recycled[: self._count][::-1], never_used])
