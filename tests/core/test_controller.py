"""Cache controller: async D2H/H2D on own threads and streams, per-layer events, acks, errors, shutdown."""

import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conformance.suites import reference as ref
from hal.backend import get_backend, register
from hal.backends.emu import EmuBackend, EmuStream
from hal.transfer import pool_ops
from hal.transfer.direction import Direction
from hal.transfer.layer_plans import LayerPlanner
from hicache_ref.core.controller import CacheController
from hicache_ref.core.controller_state import TransferCancelled, TransferError
from hicache_ref.core.pools import DevicePool, HostPool
from hicache_ref.spec import CacheSpec

PS = 4


def _geom(attention="mha", layers=3):
    return CacheSpec.of(page_size=PS, attention=attention, layers=layers, heads=2 if attention == "mha" else 1,
                     kv_dim=8, dtype="bf16").geometry.kv()


def _pools(backend, layout, attention="mha", materialize=True, dev_tokens=64, host_tokens=128):
    g = _geom(attention)
    return (DevicePool(g, dev_tokens, backend=backend, materialize=materialize),
            HostPool(g, host_tokens, layout, backend=backend, materialize=materialize))


def _fill(dp, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for part in dp.buffers:
        for t in part:
            ref.fill_random(t, gen)


def _host_logical(hp, attention):
    whole = torch.stack(hp.buffers) if attention == "mha" else hp.buffers[0]
    return ref.host_to_logical(hp.layout, attention, whole, PS)


def _pages(first_pages):
    return np.concatenate([np.arange(p * PS, (p + 1) * PS) for p in first_pages]).astype(np.int64)


@pytest.fixture(scope="module")
def emu():
    return get_backend("emu", "emu")


@pytest.fixture(scope="module")
def count():
    """Moves no bytes: pools are meta tensors and the controller prices its jobs (batched)."""
    return get_backend("count", "emu")


@pytest.mark.parametrize("attention,layout", [("mha", x) for x in ref.MHA_LAYOUTS] +
                         [("mla", x) for x in ref.MLA_LAYOUTS])
def test_backup_then_load_is_bit_identical_and_counts_match_the_plan(emu, attention, layout):
    dp, hp = _pools(emu, layout, attention)
    _fill(dp)
    di, hi, back = _pages([3, 0, 7]), _pages([9, 2, 30]), _pages([10, 11, 12])
    with CacheController(dp, hp, emu) as ctl:
        ctl.write(di, hi, tag="w").wait()
        host = _host_logical(hp, attention)
        dev = ref.device_to_logical(dp.buffers)
        ref.assert_same_bits(host[:, :, hi], dev[:, :, di], "host after backup")
        load = ctl.load(hi, back, tag="l")
        for layer in range(dp.geom.layers):
            load.wait_layer(layer)
            got = torch.stack([part[layer][back] for part in dp.buffers])
            ref.assert_same_bits(got, dev[:, layer][:, di], f"layer {layer} after load")
        acks = ctl.flush(10)  # one per direction; across directions the order is the watchers'
        assert sorted((a.direction, a.tag) for a in acks) == [("d2h", "w"), ("h2d", "l")]
        assert {type(a.direction) for a in acks} == {Direction}
        s = ctl.stats()
    full = pool_ops.plan_for(layout, dp.geom, hp.num_tokens, hi, di, "d2h")
    assert (s.d2h.tokens, s.d2h.bytes, s.d2h.segments) == (len(hi), full.nbytes, full.num_segments)
    assert (s.h2d.tokens, s.h2d.bytes, s.h2d.segments) == (len(hi), full.nbytes, full.num_segments)
    assert s.d2h.modeled_seconds == pytest.approx(emu.profile.link.seconds("d2h", full.nbytes, full.num_segments, 1))
    assert s.h2d.modeled_seconds == pytest.approx(
        emu.profile.link.seconds("h2d", full.nbytes, full.num_segments, dp.geom.layers))
    assert s.modeled_seconds == pytest.approx(s.d2h.modeled_seconds + s.h2d.modeled_seconds)


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("attention,layout", [("mha", x) for x in ref.MHA_LAYOUTS] +
                         [("mla", x) for x in ref.MLA_LAYOUTS])
def test_jobs_queued_by_page_move_and_count_what_their_slots_would(emu, attention, layout, inline):
    # Where a page is one run per layer, page jobs run on page-wide views of the pools (no slot
    # arrays): the same bytes must land in the same places, counted and priced the same.
    dev_pages, host_pages, back = np.array([3, 0, 7, 8]), np.array([9, 2, 30, 31]), np.array([10, 11, 12, 4])
    got = []
    for by_page in (False, True):
        dp, hp = _pools(emu, layout, attention)
        _fill(dp)
        with CacheController(dp, hp, emu, inline=inline) as ctl:
            wide = ctl._dirs["d2h"].mover._page_pools is not None
            if by_page:
                ctl.write_pages(dev_pages, host_pages, tag="w").wait()
                ctl.load_pages(host_pages, back, tag="l").wait_all()
            else:
                ctl.write(_pages(dev_pages), _pages(host_pages), tag="w").wait()
                ctl.load(_pages(host_pages), _pages(back), tag="l").wait_all()
            ctl.flush(10)
            s = ctl.stats()
        dev = ref.device_to_logical(dp.buffers)
        ref.assert_same_bits(dev[:, :, _pages(back)], dev[:, :, _pages(dev_pages)], "loaded back")
        got.append((_host_logical(hp, attention).clone(), [vars(d) | {"submit_seconds": 0, "max_enqueue_seconds": 0} for d in (s.d2h, s.h2d)]))
    assert wide == (layout in ("layer_first", "page_first_direct"))  # the layouts whose pages are runs
    (slot_host, slot_stats), (page_host, page_stats) = got
    assert torch.equal(slot_host.view(torch.uint8), page_host.view(torch.uint8))
    assert slot_stats == page_stats


@pytest.mark.parametrize("layout", ref.MHA_LAYOUTS)
def test_priced_pools_count_and_model_exactly_like_real_ones(emu, count, layout):
    """On count, jobs are priced in batches of one plan per wake-up; totals must not notice."""
    stats = []
    for backend in (emu, count):
        dp, hp = _pools(backend, layout)
        with CacheController(dp, hp, backend) as ctl:
            for i in range(6):
                ctl.write(_pages([i, (i * 5 + 1) % 16]), _pages([2 * i, 2 * i + 1]), tag=i)
            ctl.load(_pages([7, 8]), _pages([9, 3]))
            ctl.load(_pages([0]), _pages([10]))
            acks = ctl.flush(10)
            stats.append(ctl.stats())
        assert [a.tag for a in acks if a.direction == "d2h"] == list(range(6))
    real, priced = stats
    for d in ("d2h", "h2d"):
        r, s = getattr(real, d), getattr(priced, d)
        assert (r.transfers, r.tokens, r.bytes, r.segments) == (s.transfers, s.tokens, s.bytes, s.segments)
        assert r.modeled_seconds == pytest.approx(s.modeled_seconds)


def test_load_has_one_event_per_layer_completing_in_layer_order(emu):
    dp, hp = _pools(emu, "page_first")
    _fill(dp)
    with CacheController(dp, hp, emu) as ctl:
        h = ctl.load(_pages([0, 1]), _pages([2, 3]))
        events = [h.layer_event(i, timeout=10) for i in range(h.layers)]
        assert len({id(e) for e in events}) == dp.geom.layers
        h.wait_all(10)
        times = [e.modeled_time for e in events]
        assert times == sorted(times) and len(set(times)) == len(times)
        with pytest.raises(ValueError, match="layer"):
            h.wait_layer(dp.geom.layers)
        assert h.layer_event(np.int64(1)) is events[1]


def test_a_layer_outside_the_load_is_refused_at_once_naming_the_argument(emu):
    dp, hp = _pools(emu, "page_first")
    with CacheController(dp, hp, emu) as ctl:
        h = ctl.load(_pages([0, 1]), _pages([2, 3]))
        h.wait_all(10)
        for bad in (h.layers, h.layers + 5, -1, True, 1.0, "0"):
            for call in (h.layer_event, h.wait_layer):
                t0 = time.monotonic()
                with pytest.raises(ValueError, match="^layer: "):
                    call(bad, timeout=30)
                assert time.monotonic() - t0 < 1, (call, bad)


@pytest.mark.parametrize("name", ["emu", "count"])
def test_bad_indices_raise_before_anything_is_queued(name):
    backend = get_backend(name, "emu")
    dp, hp = _pools(backend, "layer_first")
    with CacheController(dp, hp, backend) as ctl:
        with pytest.raises(ValueError, match="host_indices: length"):
            ctl.write(_pages([0]), _pages([0, 1]))
        with pytest.raises(ValueError, match="device_indices: outside"):
            ctl.load(_pages([0]), _pages([dp.num_tokens // PS]))
        with pytest.raises(ValueError, match="device_indices: not whole page-aligned"):
            ctl.write(_pages([0]) + 1, _pages([0]))
        with pytest.raises(ValueError, match="host_indices: not whole page-aligned"):
            ctl.load(_pages([0]) + 2, _pages([1]))
        with pytest.raises(ValueError, match="device_indices: length 2 is not a multiple"):
            ctl.load(np.array([0, 1]), np.array([4, 5]))
        with pytest.raises(ValueError, match="host_indices: the same destination page"):
            ctl.write(_pages([0, 1]), _pages([2, 2]))
        with pytest.raises(ValueError, match="device_indices: the same destination page"):
            ctl.load(_pages([0, 1]), _pages([3, 3]))
        assert ctl.pending == 0 and ctl.poll() == []
        ctl.write(_pages([5, 5]), _pages([0, 1]), tag="ok")  # one page to two: only destinations must differ
        assert [a.tag for a in ctl.flush(10)] == ["ok"]  # nothing failed on a worker thread


def test_page_level_write_and_load_move_and_count_what_the_slot_level_ones_do(emu):
    dp, hp = _pools(emu, "page_first")
    _fill(dp)
    ref_dp, ref_hp = _pools(emu, "page_first")
    for part, ref_part in zip(dp.buffers, ref_dp.buffers, strict=True):
        for t, r in zip(part, ref_part, strict=True):
            r.copy_(t)
    dev, host, back = np.array([3, 0, 7]), np.array([9, 2, 30]), np.array([10, 11, 12])
    with CacheController(dp, hp, emu) as ctl, CacheController(ref_dp, ref_hp, emu) as ref_ctl:
        ctl.write_pages(dev, host, tag="w").wait(10)
        ctl.load_pages(host, back, tag="l").wait_all(10)
        ref_ctl.write(_pages(dev), _pages(host)).wait(10)
        ref_ctl.load(_pages(host), _pages(back)).wait_all(10)
        assert [(a.direction, a.tag, a.num_tokens) for a in ctl.flush(10)] in (
            [("d2h", "w", 3 * PS), ("h2d", "l", 3 * PS)], [("h2d", "l", 3 * PS), ("d2h", "w", 3 * PS)])
        s, r = ctl.stats(), ref_ctl.stats()
    ref.assert_same_bits(torch.stack(list(hp.buffers)), torch.stack(list(ref_hp.buffers)), "host")
    ref.assert_same_bits(ref.device_to_logical(dp.buffers), ref.device_to_logical(ref_dp.buffers), "device")
    for d in ("d2h", "h2d"):
        a, b = getattr(s, d), getattr(r, d)
        assert (a.transfers, a.tokens, a.bytes, a.segments) == (b.transfers, b.tokens, b.bytes, b.segments)


def test_pools_without_buffers_are_refused_naming_the_pool(emu):
    for materialize_device in (False, True):
        dp = DevicePool(_geom(), 64, backend=emu, materialize=materialize_device)
        hp = HostPool(_geom(), 128, "layer_first", backend=emu, materialize=not materialize_device)
        with pytest.raises(ValueError, match="^device_pool: has no buffers" if not materialize_device
                           else "^host_pool: has no buffers"):
            CacheController(dp, hp, emu)


def test_page_level_bad_input_is_named_before_anything_is_queued(count):
    dp, hp = _pools(count, "layer_first")
    with CacheController(dp, hp, count) as ctl:
        for call, name in ((lambda: ctl.write_pages([0], [0, 1]), "host_pages: length"),
                           (lambda: ctl.write_pages([[0]], [0]), "device_pages: expected a 1-D"),
                           (lambda: ctl.load_pages([0.5], [0]), "host_pages: expected a 1-D integer"),
                           (lambda: ctl.load_pages([0], [dp.num_tokens // PS]), "device_pages: outside"),
                           (lambda: ctl.write_pages([0], [-1]), "host_pages: outside"),
                           (lambda: ctl.write_pages([0, 1], [2, 2]), "host_pages: the same destination"),
                           (lambda: ctl.load_pages([0, 1], [3, 3]), "device_pages: the same destination")):
            with pytest.raises(ValueError, match=name):
                call()
        assert ctl.pending == 0 and ctl.poll() == []
        ctl.write_pages([5, 5], [0, 1], tag="ok")
        assert [a.tag for a in ctl.flush(10)] == ["ok"]


# -- backends that misbehave, registered like out-of-tree backends -------------------------

class _GatedBackend(EmuBackend):
    """Submissions block until `gate` opens: a submission as slow as P800's (or stuck)."""

    name = "emu-gated"
    gate = threading.Event()
    entered = threading.Event()  # a submission reached the gate

    def execute(self, plan, stream=None):
        if stream is not self.default_stream():
            self.entered.set()
            self.gate.wait()
        return super().execute(plan, stream)


class _FailingStream(EmuStream):
    def __init__(self, backend, name, fail_at):
        super().__init__(backend, name)
        self._plans, self._fail_at = 0, fail_at

    def _account(self, plan):
        self._plans += 1
        if self._plans == self._fail_at:
            raise OSError(5, "injected DMA fault")
        super()._account(plan)


class _FailingBackend(EmuBackend):
    """Every new stream fails on its `fail_at`-th plan, as a device stream hitting a fault."""

    name = "emu-failing"
    fail_at = 2

    def new_stream(self):
        self._streams_made += 1
        return self._track(_FailingStream(self, f"f{self._streams_made}", self.fail_at))


register("emu-gated", _GatedBackend)
register("emu-failing", _FailingBackend)


def test_write_and_load_return_while_the_submission_is_still_blocked():
    b = get_backend("emu-gated", "emu")
    _GatedBackend.gate.clear()
    dp, hp = _pools(b, "layer_first")
    ctl = CacheController(dp, hp, b)
    try:
        w = ctl.write(_pages([0]), _pages([0]), tag="w")
        h = ctl.load(_pages([1]), _pages([1]), tag="l")
        assert not w.done() and not h.done() and ctl.poll() == []  # nothing ran, nobody blocked
    finally:
        _GatedBackend.gate.set()
    assert {a.tag for a in ctl.shutdown(timeout=10)} == {"w", "l"}


def test_stream_failure_surfaces_on_the_scheduler_thread_and_stays():
    b = get_backend("emu-failing", "emu")
    dp, hp = _pools(b, "page_first_direct")
    _fill(dp)
    ctl = CacheController(dp, hp, b)
    ctl.write(_pages([0]), _pages([0]), tag="ok").wait(10)
    bad = ctl.write(_pages([1]), _pages([1]), tag="bad")
    with pytest.raises(TransferError, match="d2h transfer 'bad'") as info:
        bad.wait(10)
    assert "injected DMA fault" in repr(info.value.__cause__)
    for call in (ctl.poll, lambda: ctl.flush(10), lambda: ctl.write(_pages([2]), _pages([2]))):
        with pytest.raises(TransferError, match="'bad'"):
            call()
    ctl.shutdown(timeout=10)  # already reported: shutdown returns, no hang, no second raise


def test_failure_raised_from_poll_even_if_nobody_waited():
    b = get_backend("emu-failing", "emu")
    b.fail_at = 4  # a load is one plan per layer: the first load's three run, the second's first fails
    dp, hp = _pools(b, "layer_first")
    ctl = CacheController(dp, hp, b)
    ctl.load(_pages([0]), _pages([0]), tag="first").wait(10)  # the stream's plans 1-3
    ctl.load(_pages([1]), _pages([1]), tag="second")  # its 4th plan fails
    with pytest.raises(TransferError, match="h2d transfer 'second'"):
        ctl.flush(10)
    with pytest.raises(TransferError):
        ctl.poll()
    ctl.shutdown(timeout=10)


def test_unreported_failure_is_raised_by_shutdown():
    b = get_backend("emu-failing", "emu")
    dp, hp = _pools(b, "layer_first")
    ctl = CacheController(dp, hp, b)
    ctl.write(_pages([0]), _pages([0])).wait(10)
    ctl.write(_pages([1]), _pages([1]), tag="lost?")
    with pytest.raises(TransferError, match="lost"):
        ctl.shutdown(timeout=10)


def test_submission_error_surfaces_too():
    b = get_backend("emu", "emu")
    dp, hp = _pools(b, "layer_first", materialize=True)
    ctl = CacheController(dp, hp, b)
    hp.buffers = [t[:1] for t in hp.buffers]  # host pool shrunk under the controller: the op refuses
    ctl.write(_pages([3]), _pages([3]), tag="bad")
    with pytest.raises(TransferError, match="'bad'"):
        ctl.flush(10)
    ctl.shutdown(timeout=10)


def test_stuck_submission_times_out_instead_of_hanging_shutdown():
    b = get_backend("emu-gated", "emu")
    _GatedBackend.gate.clear()
    dp, hp = _pools(b, "layer_first")
    ctl = CacheController(dp, hp, b)
    ctl.write(_pages([0]), _pages([0]))
    try:
        with pytest.raises(TimeoutError, match="hicache-d2h"):
            ctl.shutdown(timeout=0.3)
    finally:
        _GatedBackend.gate.set()


def test_flush_after_a_timed_out_shutdown_returns_instead_of_waiting_forever():
    b = get_backend("emu-gated", "emu")
    _GatedBackend.gate.clear()
    dp, hp = _pools(b, "layer_first")
    ctl = CacheController(dp, hp, b)
    ctl.write(_pages([0]), _pages([0]))
    try:
        with pytest.raises(TimeoutError):
            ctl.shutdown(timeout=0.3)
        got = []
        flusher = threading.Thread(target=lambda: got.append(ctl.flush()), daemon=True)
        flusher.start()
        flusher.join(5)
        assert not flusher.is_alive() and got == [[]]  # the stuck transfer is still pending, not acked
    finally:
        _GatedBackend.gate.set()
    dp, hp = _pools(b, "layer_first")
    with CacheController(dp, hp, b) as ctl:
        ctl.write(_pages([0]), _pages([0]), tag="w")
    assert ctl.flush() == []  # drained: shutdown handed the ack out


def test_cancel_drops_unsubmitted_transfers():
    b = get_backend("emu-gated", "emu")
    _GatedBackend.gate.clear()
    dp, hp = _pools(b, "layer_first", materialize=True)  # real transfers are submitted one by one
    ctl = CacheController(dp, hp, b)
    _GatedBackend.entered.clear()
    first = ctl.write(_pages([0]), _pages([0]), tag=1)
    assert _GatedBackend.entered.wait(10)  # the first is being submitted (and stuck) before we cancel
    later = [ctl.write(_pages([i]), _pages([i]), tag=i) for i in (2, 3)]
    opener = threading.Timer(0.2, _GatedBackend.gate.set)
    opener.start()
    acks = ctl.shutdown(timeout=10, drain=False)
    opener.join()
    assert [a.tag for a in acks] in ([1], [])  # the one in flight may or may not be acked
    first.wait(10)
    for h in later:
        with pytest.raises(TransferCancelled):
            h.wait(10)


def test_drain_runs_everything_and_acks_in_completion_order(count):
    dp, hp = _pools(count, "page_first")
    ctl = CacheController(dp, hp, count)
    for i in range(16):
        ctl.write(_pages([i]), _pages([i]), tag=i)
    acks = ctl.shutdown(timeout=30)
    assert [a.tag for a in acks] == list(range(16))
    times = [a.modeled_time for a in acks]
    assert times == sorted(times)
    with pytest.raises(RuntimeError, match="shut down"):
        ctl.write(_pages([0]), _pages([0]))


# -- state machine: random traffic against a logical shadow ----------------------------------

class ControllerMachine(RuleBasedStateMachine):
    """Writes, loads, compute and polls in random order; bytes must equal a logical model.

    Like the tree, the machine never lets a transfer race another one touching the same
    slots in the other direction (or the scheduler's own writes): it flushes first.
    """

    DEV_PAGES, HOST_PAGES = 8, 12

    @initialize(layout=st.sampled_from(ref.MHA_LAYOUTS))
    def setup(self, layout):
        self.backend = get_backend("emu", "emu")
        self.dp, self.hp = _pools(self.backend, layout, dev_tokens=self.DEV_PAGES * PS,
                                  host_tokens=self.HOST_PAGES * PS)
        _fill(self.dp)
        for t in self.hp.buffers:
            t.zero_()
        self.ctl = CacheController(self.dp, self.hp, self.backend)
        self.dev = ref.device_to_logical(self.dp.buffers)
        self.host = _host_logical(self.hp, "mha")
        self.busy = {"d2h": (set(), set()), "h2d": (set(), set())}  # (device pages, host pages) in flight
        self.tags, self.acked, self.seq = [], [], 0

    def _sync_if(self, dev_pages, host_pages, other):
        d, h = self.busy[other]
        if d & set(dev_pages) or h & set(host_pages):
            self.acked += [a.tag for a in self.ctl.flush(10)]
            for s in self.busy.values():
                s[0].clear()
                s[1].clear()

    def _submit(self, data, n, direction):
        """Random distinct device and host pages; apply the copy to the model, queue it."""
        dpg = data.draw(st.lists(st.integers(0, self.DEV_PAGES - 1), min_size=n, max_size=n, unique=True))
        hpg = data.draw(st.lists(st.integers(0, self.HOST_PAGES - 1), min_size=n, max_size=n, unique=True))
        self._sync_if(dpg, hpg, "h2d" if direction == "d2h" else "d2h")
        di, hi = _pages(dpg), _pages(hpg)
        self.seq += 1
        if direction == "d2h":
            self.ctl.write(di, hi, tag=self.seq)
            self.host[:, :, hi] = self.dev[:, :, di]
        else:
            self.ctl.load(hi, di, tag=self.seq)
            self.dev[:, :, di] = self.host[:, :, hi]
        self.tags.append(self.seq)
        self.busy[direction][0].update(dpg)
        self.busy[direction][1].update(hpg)

    @rule(data=st.data(), n=st.integers(1, 3))
    def write(self, data, n):
        self._submit(data, n, "d2h")

    @rule(data=st.data(), n=st.integers(1, 3))
    def load(self, data, n):
        self._submit(data, n, "h2d")

    @rule(page=st.integers(0, DEV_PAGES - 1), value=st.integers(0, 255))
    def compute(self, page, value):
        """The scheduler writes new KV into a device page (a prefill)."""
        self._sync_if([page], [], "d2h")
        self._sync_if([page], [], "h2d")
        di = torch.from_numpy(_pages([page]))
        for p, layers in enumerate(self.dp.buffers):
            for layer, t in enumerate(layers):
                t.view(torch.int16)[di] = value + p + layer
                self.dev[p, layer].view(torch.int16)[di] = value + p + layer

    @rule()
    def poll(self):
        self.acked += [a.tag for a in self.ctl.poll()]

    @precondition(lambda self: self.tags)
    @rule()
    def flush_and_compare(self):
        self.acked += [a.tag for a in self.ctl.flush(10)]
        for s in self.busy.values():
            s[0].clear()
            s[1].clear()
        ref.assert_same_bits(ref.device_to_logical(self.dp.buffers), self.dev, "device pool")
        ref.assert_same_bits(_host_logical(self.hp, "mha"), self.host, "host pool")

    @invariant()
    def acks_are_a_subset_without_repeats(self):
        if hasattr(self, "acked"):
            assert len(self.acked) == len(set(self.acked)) and set(self.acked) <= set(self.tags)

    def teardown(self):
        if hasattr(self, "ctl"):
            self.acked += [a.tag for a in self.ctl.shutdown(timeout=10)]
            assert sorted(self.acked) == self.tags  # every transfer acked exactly once
            ref.assert_same_bits(ref.device_to_logical(self.dp.buffers), self.dev, "device pool")
            ref.assert_same_bits(_host_logical(self.hp, "mha"), self.host, "host pool")


ControllerMachine.TestCase.settings = settings(max_examples=20, stateful_step_count=15, deadline=None,
                                                suppress_health_check=[HealthCheck.too_slow])
TestControllerMachine = ControllerMachine.TestCase
TestControllerMachine.pytestmark = [pytest.mark.slow]  # many generated sequences of real transfers


# -- layer-0 plans: what the controller counts ------------------------------------------------------

@pytest.mark.parametrize("attention,layout", [("mha", x) for x in ref.MHA_LAYOUTS] +
                         [("mla", x) for x in ref.MLA_LAYOUTS])
def test_layer0_plans_count_exactly_what_the_full_plan_moves(attention, layout):
    geom, size = _geom(attention, layers=4), 256
    planner = LayerPlanner(layout, geom, size)
    per_page = layout in ("layer_first", "page_first_direct")
    assert (planner.page_geom is not None) == per_page  # derived from the address math, not a list
    rng = np.random.default_rng(1)
    cases = [(_pages(rng.permutation(size // PS)[:9]), _pages(rng.permutation(size // PS)[:9])),
             (_pages(range(3, 12)), _pages(range(20, 29))),  # contiguous: runs merge across pages
             (rng.permutation(size)[:13].astype(np.int64), rng.permutation(size)[:13].astype(np.int64))]
    for hi, di in cases:
        for direction in ("d2h", "h2d"):
            full = pool_ops.plan_for(layout, geom, size, hi, di, direction)
            one = planner.layer0(direction, hi, di)
            assert one.num_segments * geom.layers == full.num_segments
            assert one.nbytes * geom.layers == full.nbytes
            sym = planner.all_layers(direction, [(one.nbytes, one.num_segments)] * 2)
            assert (sym.num_segments, sym.nbytes) == (2 * full.num_segments, 2 * full.nbytes)
            assert sym.launches == 2 * (1 if direction == "d2h" else geom.layers)
