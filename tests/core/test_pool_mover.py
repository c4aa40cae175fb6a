"""The pool mover (hicache_ref.core.pool_mover): D2H and H2D jobs copy exactly their slots bit for bit in every host layout, queued by slot or by page; counters and prices per job whatever the batching; pools without buffers refused naming them."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conformance.suites import reference as ref
from hal.backend import get_backend
from hal.transfer import kvcacheio
from hal.transfer.direction import Direction
from hicache_ref.core.allocator import pages_to_slots
from hicache_ref.core.direction_worker import Job
from hicache_ref.core.pool_mover import PoolMover, job_slots
from hicache_ref.core.pools import DevicePool, HostPool
from hicache_ref.spec import CacheSpec

PS = 4
DEV_TOKENS, HOST_TOKENS = 32, 64
CASES = [(a, layout) for a in ("mha", "mla") for layout in ref.layouts_for(a)]


def geom(attention):
    return CacheSpec.of(page_size=PS, attention=attention, layers=3, heads=2 if attention == "mha" else 1,
                        kv_dim=8, dtype="bf16").geometry.kv()


@pytest.fixture(scope="module")
def emu():
    return get_backend("emu", "emu")


def pools(backend, attention, layout, io_backend=None):
    g = geom(attention)
    dp = DevicePool(g, DEV_TOKENS, backend=backend, materialize=True)
    hp = HostPool(g, HOST_TOKENS, layout, backend=backend, materialize=True, io_backend=io_backend)
    return dp, hp


def fill(dp, hp, seed):
    gen = torch.Generator().manual_seed(seed)
    for part in dp.buffers:
        for t in part:
            ref.fill_random(t, gen)
    for t in hp.buffers:
        ref.poison(t)


def job(host_pages, dev_pages, by_page):
    """A queued job over these pages, by page numbers or by token slots."""
    hp_, dp_ = np.array(host_pages, dtype=np.int64), np.array(dev_pages, dtype=np.int64)
    handle = SimpleNamespace(num_tokens=len(hp_) * PS)
    if by_page:
        return Job(handle, None, None, (hp_, dp_))
    return Job(handle, pages_to_slots(hp_, PS), pages_to_slots(dp_, PS))


def run(mover, backend, direction, j):
    with kvcacheio.use(backend):
        events = mover.run(direction, [j], mover.job_totals(direction, [j]))
        for e in events:
            e.wait()
    return events


def host_logical(hp, attention, layout):
    whole = torch.stack(hp.buffers) if attention == "mha" else hp.buffers[0]
    return ref.host_to_logical(layout, attention, whole, PS)


@pytest.mark.parametrize("attention,layout", CASES)
@pytest.mark.parametrize("by_page", [False, True])
def test_a_backup_and_a_load_copy_exactly_their_slots_bit_for_bit(emu, attention, layout, by_page):
    dp, hp = pools(emu, attention, layout)
    fill(dp, hp, seed=3)
    mover = PoolMover(dp, hp, emu)
    dev_pages, host_pages, back_pages = [0, 5, 6], [9, 1, 2], [3, 7, 4]
    before_host = host_logical(hp, attention, hp.layout).clone()
    events = run(mover, emu, Direction.D2H, job(host_pages, dev_pages, by_page))
    assert len(events) == 1
    dev = ref.device_to_logical(dp.buffers)
    want = ref.scatter(before_host, dev, pages_to_slots(np.array(dev_pages), PS),
                       pages_to_slots(np.array(host_pages), PS), range(dp.geom.layers))
    ref.assert_same_bits(host_logical(hp, attention, hp.layout), want, "host after backup")  # nothing else touched
    events = run(mover, emu, Direction.H2D, job(host_pages, back_pages, by_page))
    assert len(events) == dp.geom.layers  # one per layer: a layer's compute may start once it lands
    want_dev = ref.scatter(dev, dev, pages_to_slots(np.array(dev_pages), PS),
                           pages_to_slots(np.array(back_pages), PS), range(dp.geom.layers))
    ref.assert_same_bits(ref.device_to_logical(dp.buffers), want_dev, "device after load")


def test_direct_io_moves_the_same_bytes_as_the_seed_planning(emu):
    results = []
    for io_backend in (None, "direct"):
        dp, hp = pools(emu, "mha", "page_first", io_backend=io_backend)
        fill(dp, hp, seed=4)
        run(PoolMover(dp, hp, emu), emu, Direction.D2H, job([3, 0], [1, 6], by_page=False))
        results.append(host_logical(hp, "mha", hp.layout)[:, :, pages_to_slots(np.array([3, 0]), PS)])
    ref.assert_same_bits(results[1], results[0], "direct vs seed planning")


@pytest.mark.parametrize("attention,layout", CASES)
def test_page_jobs_count_what_their_slots_would(emu, attention, layout):
    dp, hp = pools(emu, attention, layout)
    mover = PoolMover(dp, hp, emu)
    pairs = [([9, 1, 2], [0, 5, 6]), ([4, 5], [1, 2]), ([7], [3])]
    for d in (Direction.D2H, Direction.H2D):
        by_page = mover.job_totals(d, [job(h, v, True) for h, v in pairs])
        by_slot = mover.job_totals(d, [job(h, v, False) for h, v in pairs])
        assert by_page == by_slot
        per_token_layer = dp.geom.parts * dp.geom.heads * dp.geom.head_dim * dp.geom.elem_size
        assert [b for b, _ in by_page] == [len(h) * PS * per_token_layer for h, _ in pairs]  # layer 0's bytes


def segments(plan):
    return [(g.src, g.dst, g.segments.src_offsets.tolist(), g.segments.dst_offsets.tolist(),
             g.segments.nbytes.tolist()) for g in plan.groups]


@pytest.mark.parametrize("layout", ref.layouts_for("mha"))
def test_a_page_jobs_layer0_plan_is_its_slot_jobs_segment_for_segment(emu, layout):
    dp, hp = pools(emu, "mha", layout)
    mover = PoolMover(dp, hp, emu)
    for d in (Direction.D2H, Direction.H2D):
        page, slot = job([4, 5, 11], [1, 7, 2], True), job([4, 5, 11], [1, 7, 2], False)
        assert segments(mover.layer0_plan(d, page)) == segments(mover.layer0_plan(d, slot))
        mixed = mover.job_totals(d, [page, slot])  # a batch not all by page: planned job by job
        assert mixed[0] == mixed[1] == mover.job_totals(d, [page])[0]


def test_job_slots_expand_page_jobs_and_pass_slot_jobs_through():
    j = job([2, 0], [1, 3], by_page=True)
    host, dev = job_slots(j, PS)
    assert host.tolist() == [8, 9, 10, 11, 0, 1, 2, 3] and dev.tolist() == [4, 5, 6, 7, 12, 13, 14, 15]
    s = job([2, 0], [1, 3], by_page=False)
    assert job_slots(s, PS)[0] is s.host_indices and job_slots(s, PS)[1] is s.device_indices


def test_a_priced_backend_moves_nothing_and_prices_each_job_alone():
    count = get_backend("count", "emu")
    dp, hp = pools(count, "mha", "layer_first")
    mover = PoolMover(dp, hp, count)
    assert mover.priced
    a, b = job([0, 1], [2, 3], True), job([5], [7], True)
    tot = mover.job_totals(Direction.D2H, [a, b])
    alone = [mover.job_seconds(Direction.D2H, t, j.handle.num_tokens) for t, j in zip(tot, [a, b], strict=True)]
    assert all(s is not None and s > 0 for s in alone) and alone[0] > alone[1]
    assert mover.job_seconds(Direction.D2H, tot[0], 8) == alone[0]  # same shape, same price
    with kvcacheio.use(count):
        events = mover.run(Direction.H2D, [a, b], mover.job_totals(Direction.H2D, [a, b]))
    assert len(events) == dp.geom.layers  # one stand-in event per layer for the batch


def test_a_kernel_copy_is_priced_by_its_tokens_and_a_direct_one_by_its_segments(emu):
    prices = {}
    for io_backend in (None, "kernel"):
        dp, hp = pools(emu, "mha", "layer_first", io_backend)
        mover = PoolMover(dp, hp, emu)
        layer0 = mover.job_totals(Direction.D2H, [job([0, 1], [2, 3], True)])[0]
        prices[io_backend] = [mover.job_seconds(Direction.D2H, layer0, tokens) for tokens in (8, 800)]
    assert prices[None][0] == prices[None][1]
    assert prices["kernel"][0] < prices["kernel"][1]


def test_kernel_items_count_tokens_times_layers_only_for_the_kernel_io_backend(emu):
    for io_backend, want in ((None, None), ("direct", None), ("kernel", 8 * 3)):
        dp, hp = pools(emu, "mha", "layer_first" if io_backend != "direct" else "page_first", io_backend)
        assert PoolMover(dp, hp, emu).kernel_items(8) == want


def test_pools_without_buffers_are_refused_naming_the_pool(emu):
    g = geom("mha")
    dp, hp = DevicePool(g, DEV_TOKENS, backend=emu), HostPool(g, HOST_TOKENS, "layer_first", backend=emu)
    with pytest.raises(ValueError, match="^device_pool: has no buffers"):
        PoolMover(dp, hp, emu)
    dp = DevicePool(g, DEV_TOKENS, backend=emu, materialize=True)
    with pytest.raises(ValueError, match="^host_pool: has no buffers"):
        PoolMover(dp, hp, emu)
