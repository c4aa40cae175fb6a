"""Cache controller with `inline`: transfers run on the calling thread, with no thread, and move,
count, price, acknowledge and fail exactly as the threaded controller's."""

import threading

import numpy as np
import pytest
import torch

from conformance.suites import reference as ref
from hal.backend import get_backend, register
from hal.backends.emu import EmuBackend, EmuStream
from hicache_ref.core.controller import CacheController
from hicache_ref.core.controller_state import TransferCancelled, TransferError
from hicache_ref.core.pools import DevicePool, HostPool
from hicache_ref.spec import CacheSpec

PS = 4


def _pools(backend, layout="layer_first", dev_tokens=64, host_tokens=128):
    g = CacheSpec.of(page_size=PS, attention="mha", layers=3, heads=2, kv_dim=8, dtype="bf16").geometry.kv()
    dp = DevicePool(g, dev_tokens, backend=backend, materialize=True)
    hp = HostPool(g, host_tokens, layout, backend=backend, materialize=True)
    gen = torch.Generator().manual_seed(0)
    for part in dp.buffers:
        for t in part:
            ref.fill_random(t, gen)
    return dp, hp


def _pages(first_pages):
    return np.concatenate([np.arange(p * PS, (p + 1) * PS) for p in first_pages]).astype(np.int64)


def _traffic(ctl):
    """Backups, loads (one slot-level, one merged), page-level calls; returns the acks. The two
    directions are not ordered against each other (a caller flushes between dependent ones)."""
    for i in range(5):
        ctl.write(_pages([i, (i * 5 + 1) % 16]), _pages([2 * i, 2 * i + 1]), tag=("w", i))
    acks = ctl.flush(10)
    ctl.load(_pages([2, 3]), _pages([9, 12]), tag=("l", 0))
    with ctl.merged_loads():
        ctl.load_pages(np.array([4, 5]), np.array([13, 14]), tag=("l", 1))
        ctl.load_pages(np.array([6]), np.array([15]), tag=("l", 2))
    acks += ctl.flush(10)
    ctl.write_pages(np.array([9, 12]), np.array([20, 21]), tag=("w", 5))
    return acks + ctl.flush(10)


@pytest.mark.parametrize("layout", ref.MHA_LAYOUTS)
def test_inline_moves_counts_prices_and_acknowledges_what_the_threads_do(layout):
    emu = get_backend("emu", "p800")
    runs = []
    for inline in (False, True):
        dp, hp = _pools(emu, layout)
        with CacheController(dp, hp, emu, inline=inline) as ctl:
            acks = _traffic(ctl)
            stats = ctl.stats()
        runs.append((dp, hp, acks, stats))
    (tdp, thp, tacks, ts), (idp, ihp, iacks, st) = runs
    ref.assert_same_bits(torch.stack(list(ihp.buffers)), torch.stack(list(thp.buffers)), "host pool")
    ref.assert_same_bits(ref.device_to_logical(idp.buffers), ref.device_to_logical(tdp.buffers), "device pool")
    for d in ("d2h", "h2d"):  # per direction, acks come in stream order on both paths
        assert [a[1:] for a in iacks if a.direction == d] == [a[1:] for a in tacks if a.direction == d]
        t, i = getattr(ts, d), getattr(st, d)
        assert (i.transfers, i.tokens, i.bytes, i.segments, i.launches) == (
            t.transfers, t.tokens, t.bytes, t.segments, t.launches)
        assert i.modeled_seconds == t.modeled_seconds and i.modeled_seconds > 0  # to the bit


def test_inline_starts_no_thread_and_a_transfer_is_done_when_queued():
    emu = get_backend("emu", "emu")
    before = threading.active_count()
    dp, hp = _pools(emu)
    ctl = CacheController(dp, hp, emu, inline=True)
    assert ctl.inline and threading.active_count() == before
    w = ctl.write(_pages([0, 1]), _pages([3, 4]), tag="w")
    h = ctl.load(_pages([3]), _pages([7]), tag="l")
    assert w.done() and h.done() and ctl.pending == 0
    assert [(a.direction, a.tag) for a in ctl.poll()] == [("d2h", "w"), ("h2d", "l")]  # no flush needed
    dev = ref.device_to_logical(dp.buffers)  # device page 0 -> host page 3 -> device page 7
    ref.assert_same_bits(dev[:, :, _pages([7])], dev[:, :, _pages([0])], "device page 7")
    assert ctl.shutdown(timeout=10) == [] and threading.active_count() == before


def test_inline_needs_a_backend_whose_streams_can_run_inline():
    class _AsyncOnly(EmuBackend):
        name = "emu-async-only"
        runs_inline = False

    b = _AsyncOnly(get_backend("emu", "emu").profile)
    dp, hp = _pools(b)
    before = threading.active_count()
    with pytest.raises(ValueError, match="^inline: backend 'emu-async-only' has no inline streams"):
        CacheController(dp, hp, b, inline=True)
    assert threading.active_count() == before
    CacheController(dp, hp, b).shutdown(timeout=10)  # the threaded controller still runs there


class _FaultyInlineStream(EmuStream):
    """Fails its `fail_at`-th plan with `error` (a device fault, or an interrupt landing mid-copy)."""

    def __init__(self, backend, name, fail_at, error):
        super().__init__(backend, name, inline=True)
        self._plans, self._fail_at, self._fault = 0, fail_at, error

    def _account(self, plan):
        self._plans += 1
        if self._plans == self._fail_at:
            raise self._fault
        super()._account(plan)


class _FaultyInlineBackend(EmuBackend):
    name = "emu-faulty-inline"
    fail_at, error = 2, OSError(5, "injected DMA fault")

    def inline_stream(self):
        self._streams_made += 1
        return self._track(_FaultyInlineStream(self, f"fi{self._streams_made}", self.fail_at, self.error))


register("emu-faulty-inline", _FaultyInlineBackend)


def test_an_inline_stream_failure_fails_stop_like_a_threaded_one():
    b = get_backend("emu-faulty-inline", "emu")
    dp, hp = _pools(b)
    ctl = CacheController(dp, hp, b, inline=True)
    ctl.write(_pages([0]), _pages([0]), tag="ok").wait(10)
    bad = ctl.write(_pages([1]), _pages([1]), tag="bad")  # returns: the failure is the handle's
    with pytest.raises(TransferError, match="d2h transfer 'bad'") as info:
        bad.wait(10)
    assert "injected DMA fault" in repr(info.value.__cause__)
    for call in (ctl.poll, lambda: ctl.flush(10), lambda: ctl.write(_pages([2]), _pages([2]))):
        with pytest.raises(TransferError, match="'bad'"):
            call()
    ctl.shutdown(timeout=10)


def test_an_unreported_inline_failure_is_raised_by_shutdown():
    b = get_backend("emu-faulty-inline", "emu")
    dp, hp = _pools(b)
    ctl = CacheController(dp, hp, b, inline=True)
    ctl.write(_pages([0]), _pages([0]))
    ctl.write(_pages([1]), _pages([1]), tag="lost?")
    with pytest.raises(TransferError, match="lost"):
        ctl.shutdown(timeout=10)


def test_an_interrupt_during_an_inline_copy_reaches_the_caller_and_the_controller_stops():
    b = get_backend("emu-faulty-inline", "emu")
    b.fail_at, b.error = 1, KeyboardInterrupt()
    dp, hp = _pools(b)
    ctl = CacheController(dp, hp, b, inline=True)
    with pytest.raises(KeyboardInterrupt):
        ctl.write(_pages([0]), _pages([0]), tag="interrupted")
    with pytest.raises(TransferError, match="'interrupted'"):
        ctl.poll()
    ctl.shutdown(timeout=10)


def test_inline_shutdown_without_drain_cancels_held_loads_and_refuses_more():
    emu = get_backend("emu", "emu")
    dp, hp = _pools(emu)
    ctl = CacheController(dp, hp, emu, inline=True)
    ctl.write(_pages([0]), _pages([0]), tag="w")
    merged = ctl.merged_loads()
    merged.__enter__()
    held = ctl.load(_pages([0]), _pages([5]), tag="held")
    assert [a.tag for a in ctl.shutdown(timeout=10, drain=False)] == ["w"]
    with pytest.raises(TransferCancelled):
        held.wait(10)
    with pytest.raises(RuntimeError, match="shut down"):
        ctl.write(_pages([1]), _pages([1]))
