"""Whole-page allocator for KV token slots, and page <-> slot conversion.

Pages are handed out whole, so slot runs are page-aligned and bookkeeping is per page. The free
list's order is chosen by name (`ORDERS`; `UPSTREAM_ORDERS` reproduce SGLang's device and host
pools) and changes only through alloc and free, so every TP rank gets the same indices.
The orders, with a worked example each: hicache_ref/README.md, "Free-list orders".
"""

from __future__ import annotations

import numpy as np

ORDERS = ("fifo", "lifo", "upstream_l1", "upstream_l1_sorted", "upstream_host")
UPSTREAM_ORDERS = dict(device="upstream_l1", host="upstream_host")

# How each order keeps its freed pages: a ring handed out oldest first (never-used pages
# before it), a stack of calls handed out newest call first (never-used pages after it),
# or a sorted ring refilled from a release list (never-used pages after it).
_QUEUE, _STACK, _SORTED = "queue", "stack", "sorted"
_KIND = dict(fifo=_QUEUE, upstream_host=_QUEUE, lifo=_STACK, upstream_l1=_STACK, upstream_l1_sorted=_SORTED)


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
    one free list over every page would give (see the module docstring for each order).
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
        self._kind = _KIND[order]
        self.num_pages = num_tokens // page_size
        self._fresh = 0  # pages [_fresh, num_pages) were never handed out
        # Pages freed since they were handed out: a ring (queue and sorted kinds; _head is the
        # next out) or a stack (the top, _count - 1, is the next out; each call's pages are
        # pushed reversed so they come off in the order given), grown by doubling, never past
        # num_pages. The sorted kind's frees wait in _release until a merge.
        self._recycled = np.zeros(0, dtype=np.int64)
        self._head = 0
        self._count = 0
        self._release: list[np.ndarray] = []
        self._released = 0
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
        if self._kind == _SORTED and n > self._count + self.num_pages - self._fresh and self._released:
            self._merge_release()  # upstream merges whenever the free list runs short, even if it then fails
        if n > self._free:
            return None
        if self._kind == _QUEUE:  # never-used pages were queued before any freed one
            fresh = min(n, self.num_pages - self._fresh)
            reused = n - fresh
            pages = np.arange(self._fresh, self._fresh + fresh, dtype=np.int64)
            if reused:
                old = self._ring(reused)
                pages = np.concatenate([pages, old]) if fresh else old
        else:  # freed pages first (stack top or sorted ring front), then never-used from the lowest
            reused = min(n, self._count)
            fresh = n - reused
            if self._kind == _STACK:
                pages = self._recycled[self._count - reused : self._count][::-1].copy()
            else:
                pages = self._ring(reused)
            if fresh:
                new = np.arange(self._fresh, self._fresh + fresh, dtype=np.int64)
                pages = np.concatenate([pages, new]) if reused else new
        if self._fresh + fresh > len(self._allocated):  # all False: no state change yet
            self._allocated = self._grown(self._allocated, self._fresh + fresh)
        # Only a corrupted free list could hand out a page twice; refuse rather than do it. Never-
        # used pages ([_fresh, _fresh + fresh)) cannot be: only the recycled ones are checked.
        if reused and (self._allocated[pages].any() or has_duplicates(pages)):
            raise RuntimeError(f"double allocation of pages {pages[self._allocated[pages]].tolist()[:8]}")
        if self._kind != _STACK and reused:
            self._head = (self._head + reused) % len(self._recycled)
        self._count -= reused
        self._fresh += fresh
        self._free -= n
        self._allocated[pages] = True
        return pages

    def _ring(self, n: int) -> np.ndarray:
        """The next `n` pages of the ring (a copy)."""
        if not n:
            return np.zeros(0, dtype=np.int64)
        if self._head + n <= len(self._recycled):  # no wrap: a slice
            return self._recycled[self._head : self._head + n].copy()
        return self._recycled[(self._head + np.arange(n)) % len(self._recycled)]

    def _merge_release(self) -> None:
        """need_sort: the release list joins the free list, and the whole list is sorted."""
        merged = np.sort(np.concatenate([self._ring(self._count), *self._release]))
        self._recycled = self._grown(merged, len(merged))
        self._head, self._count = 0, len(merged)
        self._release, self._released = [], 0

    def free_pages(self, pages) -> None:
        pages = np.asarray(pages, dtype=np.int64).reshape(-1)
        n = len(pages)
        if not n:
            return
        if n == 1:  # the common call (a request's partial last page): the same checks on one int
            p = int(pages[0])
            if p < 0 or p >= self.num_pages:
                raise ValueError(f"indices: page outside this pool of {self.num_pages} pages")
            if p >= len(self._allocated) or not self._allocated[p]:
                raise ValueError(f"indices: double free of pages {[p]}")
        else:
            top = pages.max()
            if pages.min() < 0 or top >= self.num_pages:
                raise ValueError(f"indices: page outside this pool of {self.num_pages} pages")
            if has_duplicates(pages):
                raise ValueError("indices: the same page is freed twice in one call")
            held = self._allocated[pages] if top < len(self._allocated) else self._is_allocated(pages)
            if not held.all():
                raise ValueError(f"indices: double free of pages {pages[~held].tolist()[:8]}")
        if self._kind == _SORTED:
            self._release.append(pages.copy())
            self._released += n
        else:
            if self._count + n > len(self._recycled):
                self._unroll_and_grow(self._count + n)
            if self._kind == _QUEUE:
                tail = self._head + self._count
                if tail + n <= len(self._recycled):  # no wrap: a slice (n == 1 mostly: one page)
                    self._recycled[tail : tail + n] = pages
                else:
                    self._recycled[(tail + np.arange(n)) % len(self._recycled)] = pages
            else:  # pushed reversed: the stack hands the call's pages back in ascending (given) order
                if self.order == "upstream_l1":
                    pages = np.sort(pages)  # torch.unique in upstream's free
                self._recycled[self._count : self._count + n] = pages[::-1]
            self._count += n
        self._free += n
        if n == 1:
            self._allocated[int(pages[0])] = False
        else:
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
        """Room for `need` freed pages; a ring is unrolled so its next page out is at 0."""
        live = self._ring(self._count) if self._kind == _QUEUE else self._recycled[: self._count]
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
        """Free pages in the order one-page allocations would hand them out (for tests and reports)."""
        never_used = np.arange(self._fresh, self.num_pages, dtype=np.int64)
        if self._kind == _QUEUE:
            return np.concatenate([never_used, self._ring(self._count)])
        if self._kind == _STACK:
            return np.concatenate([self._recycled[: self._count][::-1], never_used])
        return np.concatenate([self._ring(self._count), never_used, np.sort(np.concatenate([never_used[:0], *self._release]))])
