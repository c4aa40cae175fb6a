"""Free-list orders of the page allocator, each against a sequence worked out by hand.

Every case: a pool of 8 pages (page_size 4), all 8 allocated, then frees and allocations as
written. The expected pages follow from each order's rule (hicache_ref.core.allocator docstring).
"""

import numpy as np
import pytest

from hicache_ref.core.allocator import ORDERS, UPSTREAM_ORDERS, PageAllocator


def _full(order):
    a = PageAllocator(8 * 4, 4, order)
    assert a.alloc_pages(8).tolist() == list(range(8))
    return a


def _runs(pages) -> int:
    """Maximal runs of consecutive pages: the segments of a copy into one contiguous range."""
    pages = np.asarray(pages)
    return int(1 + (np.diff(pages) != 1).sum()) if len(pages) else 0


# free([5, 2, 3]), free([6, 7]), then alloc 2 and alloc 3 (the module docstring's example)
DOC_EXAMPLE = {
    "fifo": ([5, 2], [3, 6, 7]),  # back of the list, in the order given
    "upstream_host": ([5, 2], [3, 6, 7]),  # HostKVCache: concatenated behind the free slots
    "lifo": ([6, 7], [5, 2, 3]),  # newest call first, each call in the order given
    "upstream_l1": ([6, 7], [2, 3, 5]),  # torch.unique sorts each call, which goes in front
    "upstream_l1_sorted": ([2, 3], [5, 6, 7]),  # free list empty: release list merged and sorted
}


@pytest.mark.parametrize("order", ORDERS)
def test_each_order_on_the_documented_example(order):
    a = _full(order)
    a.free_pages(np.array([5, 2, 3]))
    a.free_pages(np.array([6, 7]))
    first, second = DOC_EXAMPLE[order]
    assert a.alloc_pages(2).tolist() == first
    assert a.alloc_pages(3).tolist() == second
    assert a.available_pages == 0 and a.alloc_pages(1) is None


@pytest.mark.parametrize("order", ["lifo", "upstream_l1", "upstream_l1_sorted"])
def test_a_freed_run_comes_back_ascending(order):
    a = _full(order)
    a.free_pages(np.array([2, 3, 4, 5]))
    assert a.alloc_pages(4).tolist() == [2, 3, 4, 5]


def test_need_sort_merges_only_when_the_free_list_runs_short():
    a = PageAllocator(8 * 4, 4, "upstream_l1_sorted")
    assert a.alloc_pages(4).tolist() == [0, 1, 2, 3]  # free list now 4..7
    a.free_pages(np.array([1, 0]))  # to the release list, not handed out yet
    assert a.available_pages == 6
    assert a.alloc_pages(3).tolist() == [4, 5, 6]  # 3 <= 4 listed: no merge
    assert a.free_page_list().tolist() == [7, 0, 1]
    assert a.alloc_pages(2).tolist() == [0, 1]  # 2 > 1 listed: merge, sort -> [0, 1, 7]
    assert a.alloc_pages(1).tolist() == [7]


def test_never_used_pages_come_after_freed_ones_for_lifo_like_orders_and_before_for_fifo():
    for order, want in (("fifo", [4, 5, 6]), ("upstream_host", [4, 5, 6]), ("lifo", [0, 4, 5]),
                        ("upstream_l1", [0, 4, 5]), ("upstream_l1_sorted", [4, 5, 6])):
        a = PageAllocator(8 * 4, 4, order)
        a.alloc_pages(4)
        a.free_pages(np.array([0]))
        # upstream_l1_sorted: 3 <= 4 never-used pages listed, so page 0 waits in the release list
        assert a.alloc_pages(3).tolist() == want, order


def test_recycled_runs_give_fewer_segments_with_lifo_than_fifo():
    # Free [2 3 4 5], then [0 1]; take 6 pages: lifo-like orders hand back [0 1 2 3 4 5], one
    # run; fifo-like ones [2 3 4 5 0 1], two runs (a reversed stack would give 6).
    want = dict(lifo=1, upstream_l1=1, upstream_l1_sorted=1, fifo=2, upstream_host=2)
    got = {}
    for order in ORDERS:
        a = _full(order)
        a.free_pages(np.array([2, 3, 4, 5]))
        a.free_pages(np.array([0, 1]))
        got[order] = _runs(a.alloc_pages(6))
    assert got == want
    assert got["lifo"] <= got["fifo"]


def test_upstream_orders_name_known_orders():
    assert UPSTREAM_ORDERS == dict(device="upstream_l1", host="upstream_host")
    assert set(UPSTREAM_ORDERS.values()) <= set(ORDERS)
