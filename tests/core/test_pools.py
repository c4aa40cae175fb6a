"""Page allocator (FIFO/LIFO, double alloc/free, determinism) and device/host pool shapes and memory."""

import numpy as np
import pytest
import torch

from hal.backend import get_backend
from hal.transfer import layouts
from hicache_ref.core.allocator import ORDERS, PageAllocator, pages_to_slots, slots_to_pages
from hicache_ref.core.pools import DevicePool, HostPool

MHA = layouts.KVGeometry("mha", layers=3, heads=2, head_dim=4, dtype=torch.float16, page_size=4)
MLA = layouts.KVGeometry("mla", layers=3, heads=1, head_dim=6, dtype=torch.bfloat16, page_size=4)


def test_alloc_returns_whole_page_aligned_slots():
    a = PageAllocator(32, 4)
    got = a.alloc(8)
    assert got.dtype == np.int64 and got.tolist() == list(range(8))
    assert a.available_tokens == 24 and a.used_tokens == 8


def test_fifo_reuses_freed_pages_last():
    a = PageAllocator(16, 4, "fifo")
    first = a.alloc(8)  # pages 0, 1
    a.free(first[4:])  # page 1
    a.free(first[:4])  # page 0
    assert slots_to_pages(a.alloc(16), 4).tolist() == [2, 3, 1, 0]


def test_lifo_reuses_most_recently_freed_page_first():
    a = PageAllocator(16, 4, "lifo")
    assert slots_to_pages(a.alloc(8), 4).tolist() == [0, 1]  # a fresh pool hands out low pages first
    a.free(pages_to_slots(np.array([1]), 4))
    a.free(pages_to_slots(np.array([0]), 4))
    assert slots_to_pages(a.alloc(16), 4).tolist() == [0, 1, 2, 3]
    a.free(pages_to_slots(np.array([3, 1]), 4))
    assert slots_to_pages(a.alloc(4), 4).tolist() == [3]  # one call's pages come back in the order given


@pytest.mark.parametrize("order", ORDERS)
def test_double_free_and_foreign_slots_raise_without_state_change(order):
    a = PageAllocator(32, 4, order)
    got = a.alloc(12)
    a.free(got[:4])
    before = (a.available_tokens, a.free_page_list().tolist())
    bad = [
        got[:4],  # double free
        np.concatenate([got[4:8], got[4:8]]),  # same page twice in one call
        np.array([32, 33, 34, 35]),  # outside the pool
        got[5:9],  # not page-aligned
        got[4:6],  # partial page
        np.array([4.0, 5.0, 6.0, 7.0]),  # not integers
    ]
    for indices in bad:
        with pytest.raises(ValueError, match="indices"):
            a.free(indices)
        assert (a.available_tokens, a.free_page_list().tolist()) == before


def test_double_allocation_from_a_corrupted_free_list_is_refused():
    for order in ("fifo", "lifo", "upstream_l1", "upstream_host"):
        a = PageAllocator(16, 4, order)
        a.alloc(16)  # pages 0-3
        a.free_pages(np.array([1]))
        a._recycled[a._head if order in ("fifo", "upstream_host") else a._count - 1] = 0  # corrupt: page 0 is allocated and next out
        with pytest.raises(RuntimeError, match="double allocation"):
            a.alloc(4)
        assert a.available_pages == 1  # refused before anything changed


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_tokens"):
        PageAllocator(10, 4)
    with pytest.raises(ValueError, match="page_size"):
        PageAllocator(16, 0)
    with pytest.raises(ValueError, match="order"):
        PageAllocator(16, 4, "random")
    a = PageAllocator(16, 4)
    with pytest.raises(ValueError, match="n_tokens"):
        a.alloc(6)
    assert a.alloc(20) is None and a.available_tokens == 16


@pytest.mark.parametrize("order", ORDERS)
def test_same_operations_give_same_indices(order):
    def run():
        rng = np.random.default_rng(7)  # the op sequence; each run replays the same one
        a, held, out = PageAllocator(256, 8, order), [], []
        for _ in range(300):
            if held and rng.random() < 0.45:
                out.append(("free", held.pop(int(rng.integers(len(held)))).tolist()))
                a.free(out[-1][1])
            else:
                got = a.alloc(8 * int(rng.integers(1, 5)))
                out.append(("alloc", None if got is None else got.tolist()))
                if got is not None:
                    held.append(got)
            assert a.available_tokens + sum(len(h) for h in held) == 256  # conservation
        return out

    assert run() == run()


def test_device_pool_buffers_per_part_and_layer():
    pool = DevicePool(MHA, 32, backend=get_backend("emu"), materialize=True, order="lifo")
    assert len(pool.buffers) == 2 and all(len(p) == 3 for p in pool.buffers)
    assert pool.buffers[1][2].shape == layouts.device_shape(MHA, 32) and pool.buffers[0][0].dtype == torch.float16
    assert pool.allocator.order == "lifo" and pool.allocator.page_size == 4
    mla = DevicePool(MLA, 16, materialize=True)
    assert len(mla.buffers) == 1 and mla.buffers[0][0].shape == (16, 1, 6)
    assert DevicePool(MHA, 32).buffers is None


@pytest.mark.parametrize("geom,layout", [(MHA, lay) for lay in layouts.HOST_LAYOUTS]
                         + [(MLA, lay) for lay in layouts.MLA_LAYOUTS])
def test_host_pool_views_of_one_allocation(geom, layout):
    pool = HostPool(geom, 32, layout, materialize=True)
    try:
        shape = layouts.host_shape(layout, geom, 32)
        want = [shape[1:]] * 2 if geom.attention == "mha" else [shape]
        assert [tuple(b.shape) for b in pool.buffers] == want
        assert all(b.dtype == geom.dtype for b in pool.buffers)
        base = pool.buffers[0].untyped_storage().data_ptr()
        assert all(b.untyped_storage().data_ptr() == base for b in pool.buffers)
        if geom.attention == "mha":  # V follows K in the same allocation
            k, v = pool.buffers
            assert v.data_ptr() - k.data_ptr() == 32 * geom.layout_dim  # one part: 32 slots of every layer
        pool.buffers[-1].view(-1)[-1] = 3  # the whole range is writable
    finally:
        pool.close()
    assert pool.buffers is None


def test_host_pool_uses_a_callers_buffer_and_leaves_it_open():
    from hal.memory.host import allocate_host

    need = HostPool(MHA, 16, "page_first").nbytes
    buf = allocate_host(need, huge_pages=False)
    try:
        pool = HostPool(MHA, 16, "page_first", host_buffer=buf)
        pool.buffers[0].fill_(1)
        pool.close()
        assert buf.tensor[:8].tolist() == [0, 60] * 4  # fp16 1.0 is 0x3C00; still mapped
    finally:
        buf.close()
    with pytest.raises(ValueError, match="host_buffer"):
        HostPool(MHA, 16, "page_first", host_buffer=type("B", (), {"tensor": torch.zeros(8, dtype=torch.uint8)})())


def test_host_pool_memory_comes_from_hal_memory():
    from hal.memory.host import HostBuffer

    pool = HostPool(MLA, 16, "layer_first", materialize=True)
    try:
        assert isinstance(pool.host_buffer, HostBuffer) and not pool.host_buffer.closed
        assert pool.buffers[0].data_ptr() == pool.host_buffer.address
    finally:
        pool.close()
    empty = HostPool(MLA, 0, "layer_first", materialize=True)  # nothing to map
    assert empty.host_buffer is None and empty.buffers[0].numel() == 0


def test_pool_bad_input():
    with pytest.raises(ValueError, match="num_tokens"):
        DevicePool(MHA, 30)
    with pytest.raises(ValueError, match="num_tokens"):
        HostPool(MHA, -4, "page_first")
    with pytest.raises(ValueError, match="order"):
        DevicePool(MHA, 32, order="random")
    with pytest.raises(ValueError, match="layout"):
        HostPool(MLA, 16, "page_head")
    with pytest.raises(ValueError, match="layout"):
        HostPool(MHA, 16, "nonsense")


def test_pools_on_a_backend_that_moves_no_bytes_are_meta_tensors_without_memory():
    from hal.backend import get_backend

    count = get_backend("count", "emu")
    dev = DevicePool(MHA, 1 << 30, backend=count, materialize=True)  # a GiB-scale pool costs nothing
    host = HostPool(MHA, 1 << 30, "page_head", backend=count, materialize=True)
    assert all(t.is_meta for part in dev.buffers for t in part)
    assert host.host_buffer is None and len(host.buffers) == 2 and all(t.is_meta for t in host.buffers)
    assert host.buffers[0].shape == layouts.host_shape("page_head", MHA, 1 << 30)[1:]
    host.close()
    assert host.buffers is None


class _OneFreeList:
    """The allocator's documented order, kept naively as upstream keeps it: one list of every
    free page, handed out from the front, plus need_sort's release list."""

    def __init__(self, num_pages, order):
        self.order = order
        self.free = list(range(num_pages))
        self.release_list = []

    def alloc(self, n):
        if self.order == "upstream_l1_sorted" and n > len(self.free):
            self.free, self.release_list = sorted(self.free + self.release_list), []
        if n > len(self.free):
            return None
        got, self.free = self.free[:n], self.free[n:]
        return got

    def release(self, pages):
        if self.order in ("fifo", "upstream_host"):
            self.free += list(pages)
        elif self.order == "lifo":
            self.free = list(pages) + self.free
        elif self.order == "upstream_l1":
            self.free = sorted(pages) + self.free
        else:
            self.release_list = list(pages) + self.release_list

    def available(self):
        return len(self.free) + len(self.release_list)

    def listing(self):
        return self.free + sorted(self.release_list)


@pytest.mark.parametrize("order", ORDERS)
def test_lazy_free_list_hands_out_what_one_list_of_every_page_would(order):
    rng = np.random.default_rng(7)
    a, model, held = PageAllocator(300 * 4, 4, order), _OneFreeList(300, order), []
    for step in range(3000):
        if held and rng.random() < 0.45:
            pages = held.pop(int(rng.integers(len(held))))
            a.free_pages(pages)
            model.release(pages.tolist())
        else:
            n = int(rng.integers(0, 25))
            got, want = a.alloc_pages(n), model.alloc(n)
            assert (None if got is None else got.tolist()) == want, step
            if got is not None and len(got):
                held.append(got)
        assert a.available_pages == model.available()
        if step % 97 == 0:
            assert a.free_page_list().tolist() == model.listing()


def test_bookkeeping_grows_with_use_not_capacity():
    a = PageAllocator(50_000_000_000 // 64 * 64, 64)  # a 50G-token pool: 781M pages
    pages = a.alloc_pages(10)
    a.free_pages(pages[:3])
    assert a.available_pages == a.num_pages - 7
    assert a._allocated.nbytes + a._recycled.nbytes < 1 << 20
    assert a.pages_allocated(pages[3:]) and not a.pages_allocated(np.array([a.num_pages - 1]))
    with pytest.raises(ValueError, match="double free"):
        a.free_pages(np.array([a.num_pages - 1]))  # in the pool, never handed out
