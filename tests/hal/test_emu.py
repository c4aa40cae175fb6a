"""Emu backend: FIFO streams, cross-stream events, the modeled clock, sticky errors, pinning."""

import threading

import numpy as np
import pytest
import torch

from hal.backend import available_backends, backend_class, get_backend
from hal.backends.emu import EmuBackend
from hal.transfer import kvcacheio as kv
from hal.transfer import segcopy
from hal.transfer.plan import CopyGroup, Segments, TransferPlan


@pytest.fixture
def emu():
    return get_backend("emu", "p800")


def _plan(src, dst, n):
    seg = Segments(np.array([0], dtype=np.int64), np.array([0], dtype=np.int64), np.array([n], dtype=np.int64))
    return TransferPlan("test", [CopyGroup(src, dst, seg)])


def test_registry_knows_builtins_and_rejects_unknown():
    assert {"emu", "cuda", "xpu"} <= set(available_backends())
    assert backend_class("emu") is EmuBackend
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        get_backend("nope")


def test_direction_follows_device_allocations(emu):
    dev = emu.alloc_device((4, 8), torch.float32)
    host = torch.zeros(4, 8)
    assert emu.is_device(dev) and emu.is_device(dev[1]) and not emu.is_device(host)
    plan = _plan(dev, host, 128)
    emu.execute(plan).wait()
    assert plan.direction == "d2h"


def test_a_late_finalizer_of_a_freed_buffer_does_not_forget_a_new_one_at_its_address(emu, monkeypatch):
    """A device mapping is unmapped before its finalizer runs, and the last reference may die on
    a stream thread, so a new device buffer can be registered at the same address first (this
    made per-layer loads price some layers as host-to-host, 0 s, about one run in three)."""
    import hal.backends.emu as emu_module

    deferred = []
    monkeypatch.setattr(emu_module.weakref, "finalize", lambda obj, fn, *args: deferred.append((fn, args)))
    old = emu.alloc_device((1 << 16,), torch.uint8)
    old_ptr = old.untyped_storage().data_ptr()
    del old  # unmapped now; its finalizer is held back, as on a busy stream thread
    keep = []
    for _ in range(8):  # the kernel hands the freed range out again for the same size
        keep.append(emu.alloc_device((1 << 16,), torch.uint8))
        if keep[-1].untyped_storage().data_ptr() == old_ptr:
            break
    else:
        pytest.skip("the kernel did not reuse the freed address")
    fn, args = deferred[0]
    fn(*args)  # the old mapping's finalizer runs late
    assert emu.is_device(keep[-1])


def test_symbolic_plans_are_refused_they_run_on_count(emu):
    """Unmaterialized replay runs on the count backend; emu executes only plans of tensors."""
    with pytest.raises(ValueError, match="not a tensor"):
        emu.execute(_plan(("host", 0), ("device", 0), 16))
    assert not getattr(emu, "runs_symbolic_plans", False)


def test_modeled_clock_advances_by_link_model(emu):
    dev = emu.alloc_device((1024,), torch.uint8).zero_()
    src = torch.full((1024,), 7, dtype=torch.uint8)
    host = torch.zeros(1024, dtype=torch.uint8)
    s = emu.new_stream()
    e1 = emu.execute(_plan(src, dev, 1024), s)
    e2 = emu.execute(_plan(dev, host, 1024), s)
    e2.wait()
    h2d = emu.profile.link.seconds("h2d", 1024, 1, 1)
    assert e1.modeled_time == pytest.approx(h2d)
    d2h = emu.profile.link.seconds("d2h", 1024, 1, 1)
    if d2h is None:
        assert e2.modeled_time is None  # unknown link values are reported as unknown, not zero
    else:
        assert e2.modeled_time == pytest.approx(h2d + d2h)
    assert torch.equal(host, torch.full((1024,), 7, dtype=torch.uint8))


def test_stream_waiting_on_event_starts_after_it_in_modeled_time():
    emu = get_backend("emu", "emu")
    a, b = emu.new_stream(), emu.new_stream()
    dev = emu.alloc_device((1 << 20,), torch.uint8)
    host = torch.zeros(1 << 20, dtype=torch.uint8)
    ea = emu.execute(_plan(host, dev, 1 << 20), a)
    b.wait_event(ea)
    eb = emu.execute(_plan(host, dev, 1 << 10), b)
    eb.wait()
    assert ea.query()
    assert eb.modeled_time > ea.modeled_time


def test_fifo_order_on_one_stream(emu):
    dev = emu.alloc_device((64,), torch.uint8)
    hosts = [torch.full((64,), i, dtype=torch.uint8) for i in range(20)]
    s = emu.new_stream()
    for h in hosts:
        ev = emu.execute(_plan(h, dev, 64), s)
    ev.wait()
    assert torch.equal(dev, hosts[-1])


class _FailingBackend(EmuBackend):
    """A real emu backend whose link model breaks on the second plan (fault injection)."""

    calls = 0

    def model_seconds(self, plan):
        type(self).calls += 1
        if type(self).calls == 2:
            raise RuntimeError("injected link failure")
        return super().model_seconds(plan)


def test_stream_error_is_sticky_and_reraised():
    b = _FailingBackend(get_backend("emu", "emu").profile)
    dev = b.alloc_device((16,), torch.uint8)
    host = torch.zeros(16, dtype=torch.uint8)
    s = b.new_stream()
    b.execute(_plan(host, dev, 16), s).wait()
    with pytest.raises(RuntimeError, match="injected link failure"):
        b.execute(_plan(host, dev, 16), s).wait(timeout=10)
    with pytest.raises(RuntimeError, match="injected link failure"):
        b.execute(_plan(host, dev, 16), s).wait(timeout=10)


def test_out_of_bounds_plan_is_refused_before_queueing(emu):
    dev = emu.alloc_device((16,), torch.uint8)
    host = torch.zeros(8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="outside"):
        emu.execute(_plan(dev, host, 16))


def _vm_locked_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmLck"))


def test_register_host_pins_pages(emu):
    buf = torch.ones(8 << 20, dtype=torch.uint8)
    before = _vm_locked_kb()
    h = emu.register_host(buf.data_ptr(), buf.numel())
    assert _vm_locked_kb() - before >= (8 << 10) - 4
    emu.unregister_host(h)
    assert _vm_locked_kb() - before < 8


def test_kvcacheio_use_binds_backend_and_stream(emu):
    s = emu.new_stream()
    dev = emu.alloc_device((4, 1, 8), torch.float32)
    host = torch.arange(32, dtype=torch.float32).reshape(4, 1, 8)
    idx = torch.arange(4)
    with kv.use(emu, s):
        assert kv.active_backend() is emu and kv.current_stream() is s
        ev = kv.transfer_kv_per_layer_mla(host, dev, idx, idx, 32)
    ev.wait()
    assert torch.equal(dev, host)
    assert kv.current_stream() is None


def _segments(n, size, reverse=False):
    order = np.arange(n)[::-1] if reverse else np.arange(n)
    off = (order * size).astype(np.int64)
    return Segments(off, off.copy(), np.full(n, size, dtype=np.int64))


class _GatedCopies:
    """Stands in for segcopy.copy_groups to make the stream-order hazard certain, not timing luck.

    The stream's first copy blocks until release(), so every plan submitted meanwhile is queued
    behind it and offered to one batch. Each call's groups are recorded and copied in reverse,
    an order a parallel copy may take: a read batched with the write it depends on then sees
    the old bytes on every run, while plans kept in separate batches still copy correctly.
    """

    def __init__(self, monkeypatch):
        self.calls: list[list] = []
        self.entered, self._gate = threading.Event(), threading.Event()
        real = segcopy.copy_groups

        def copy_groups(groups):
            self.calls.append(list(groups))
            if len(self.calls) == 1:
                self.entered.set()
                assert self._gate.wait(30), "the test never released the stream"
            real(list(reversed(groups)))

        monkeypatch.setattr(segcopy, "copy_groups", copy_groups)

    def hold_stream(self, emu, stream) -> None:
        """Give `stream` a first plan and return once its worker is copying it (and blocked)."""
        src, dst = emu.alloc_device((64,), torch.uint8), torch.empty(64, dtype=torch.uint8)
        emu.execute(_plan(src, dst, 64), stream)
        assert self.entered.wait(30), "the stream never started its first copy"

    def release(self) -> None:
        self._gate.set()

    def batched_together(self, a: TransferPlan, b: TransferPlan) -> bool:
        ga, gb = {id(g) for g in a.groups}, {id(g) for g in b.groups}
        return any(ga & {id(g) for g in call} and gb & {id(g) for g in call} for call in self.calls)


def test_queued_plans_keep_stream_order_when_one_reads_what_another_writes(monkeypatch):
    emu = get_backend("emu", "emu")
    s = emu.new_stream()
    copies = _GatedCopies(monkeypatch)
    n, size = 64, 64 << 10
    dev = emu.alloc_device((n * size,), torch.uint8).fill_(9)
    host = torch.zeros(n * size, dtype=torch.uint8)
    back = emu.alloc_device((n * size,), torch.uint8).zero_()
    copies.hold_stream(emu, s)  # both plans below are queued while the worker is busy
    write = TransferPlan("write", [CopyGroup(dev, host, _segments(n, size))])
    read = TransferPlan("read", [CopyGroup(host, back, _segments(n, size, reverse=True))])
    e1 = emu.execute(write, s)
    e2 = emu.execute(read, s)
    copies.release()
    e2.wait(30)
    assert not copies.batched_together(write, read)
    assert e1.query() and e1.modeled_time < e2.modeled_time
    assert torch.equal(back, dev)  # the read saw every byte the earlier write put there


@pytest.mark.parametrize("hazard", ["write-after-read", "write-after-write"])
def test_queued_plans_keep_stream_order_for_every_hazard(monkeypatch, hazard):
    # RAW is the test above; here the later plan writes what the earlier one reads or writes.
    emu = get_backend("emu", "emu")
    s = emu.new_stream()
    copies = _GatedCopies(monkeypatch)
    n = 1 << 16
    old, new = (emu.alloc_device((n,), torch.uint8).fill_(v) for v in (1, 2))
    shared = torch.empty(n, dtype=torch.uint8)
    out = emu.alloc_device((n,), torch.uint8).zero_()
    copies.hold_stream(emu, s)
    if hazard == "write-after-read":
        shared.fill_(1)
        first, second = _plan(shared, out, n), _plan(new, shared, n)  # out must get the old bytes
    else:
        first, second = _plan(old, shared, n), _plan(new, shared, n)  # shared must end as `new`
    emu.execute(first, s)
    ev = emu.execute(second, s)
    copies.release()
    ev.wait(30)
    assert not copies.batched_together(first, second)
    if hazard == "write-after-read":
        assert torch.equal(out, old) and torch.equal(shared, new)
    else:
        assert torch.equal(shared, new)


def test_disjoint_queued_plans_are_batched_into_one_copy(monkeypatch):
    # The other half of the rule: plans that share no bytes do go into one copy call.
    emu = get_backend("emu", "emu")
    s = emu.new_stream()
    copies = _GatedCopies(monkeypatch)
    host = torch.ones(1 << 16, dtype=torch.uint8)
    devs = [emu.alloc_device((1 << 16,), torch.uint8) for _ in range(2)]
    copies.hold_stream(emu, s)
    plans = [_plan(host, d, 1 << 16) for d in devs]
    events = [emu.execute(p, s) for p in plans]
    copies.release()
    events[-1].wait(30)
    assert copies.batched_together(*plans) and len(copies.calls) == 2
    assert all(torch.equal(d, host) for d in devs)


def test_independent_queued_plans_complete_in_order_with_per_plan_modeled_times():
    emu = get_backend("emu", "emu")
    s = emu.new_stream()
    host = torch.ones(1 << 20, dtype=torch.uint8)
    devs = [emu.alloc_device((1 << 20,), torch.uint8) for _ in range(8)]
    events = [emu.execute(_plan(host, d, 1 << 20), s) for d in devs]
    events[-1].wait()
    times = [e.modeled_time for e in events]
    step = emu.profile.link.seconds("h2d", 1 << 20, 1, 1)
    assert times == pytest.approx([step * (i + 1) for i in range(8)])
    assert all(torch.equal(d, host) for d in devs)


@pytest.mark.parametrize("segments,match", [
    (Segments(np.array([0]), np.array([0]), np.array([-1])), "segment of -1 bytes"),
    (Segments(np.array([0, 8]), np.array([0]), np.array([8, 8])), "different sizes"),
    (Segments(np.array([-8]), np.array([0]), np.array([8])), "outside"),
])
def test_malformed_plans_are_refused_before_any_byte_moves(emu, segments, match):
    src = emu.alloc_device((64,), torch.uint8).fill_(1)
    dst = torch.zeros(64, dtype=torch.uint8)
    with pytest.raises(ValueError, match=match):
        emu.execute(TransferPlan("bad", [CopyGroup(src, dst, segments)]))
    assert not dst.any()


def test_close_ends_every_stream_thread_after_its_queued_work():
    import threading

    before = set(threading.enumerate())
    emu = get_backend("emu", "emu")
    assert set(threading.enumerate()) == before  # no stream until one is used
    dev = emu.alloc_device((1 << 16,), torch.uint8)
    host = torch.ones(1 << 16, dtype=torch.uint8)
    events = [emu.execute(_plan(host, dev, 1 << 16)), emu.execute(_plan(host, dev, 1 << 16), emu.new_stream())]
    mine = set(threading.enumerate()) - before
    assert len(mine) == 2
    emu.close()
    for ev in events:
        ev.wait(10)
    for t in mine:
        t.join(10)
    assert not any(t.is_alive() for t in mine) and torch.equal(dev, host)


def test_close_returns_only_once_the_stream_thread_has_ended(monkeypatch):
    """A worker still copying when the interpreter exits aborts the process (SIGABRT): close joins it."""
    import time

    import hal.backends.emu as emu_module

    real = emu_module.segcopy.copy_groups
    monkeypatch.setattr(emu_module.segcopy, "copy_groups", lambda groups: (time.sleep(0.3), real(groups)))
    emu = get_backend("emu", "emu")
    s = emu.new_stream()
    dev = emu.alloc_device((1 << 12,), torch.uint8)
    ev = emu.execute(_plan(torch.ones(1 << 12, dtype=torch.uint8), dev, 1 << 12), s)
    s.close()
    assert not s._thread.is_alive() and ev.query()
    emu.close()  # closing again (every stream) is harmless


def test_views_of_one_storage_are_ordered_even_when_queued_together(monkeypatch):
    # Write into one half of a buffer, then read a view over the whole of it: the read must
    # wait for the write although the two plans name different tensor objects.
    emu = get_backend("emu", "emu")
    s = emu.new_stream()
    copies = _GatedCopies(monkeypatch)
    n, size = 64, 64 << 10
    dev = emu.alloc_device((n * size,), torch.uint8).fill_(5)
    host = torch.zeros(2 * n * size, dtype=torch.uint8)
    back = emu.alloc_device((n * size,), torch.uint8).zero_()
    copies.hold_stream(emu, s)
    write = TransferPlan("write", [CopyGroup(dev, host[n * size:], _segments(n, size))])
    emu.execute(write, s)
    whole = host.view(2, n * size)[1]  # another tensor object over the same bytes
    read = TransferPlan("read", [CopyGroup(whole, back, _segments(n, size, reverse=True))])
    ev = emu.execute(read, s)
    copies.release()
    ev.wait(30)
    assert not copies.batched_together(write, read)
    assert torch.equal(back, dev)


# -- inline streams: the same work on the submitting thread -------------------------------------

def test_an_inline_stream_runs_each_submission_before_returning_and_holds_no_thread(emu):
    before = threading.active_count()
    s = emu.inline_stream()
    assert threading.active_count() == before
    dev = emu.alloc_device((1024,), torch.uint8).zero_()
    src = torch.full((1024,), 7, dtype=torch.uint8)
    host = torch.zeros(1024, dtype=torch.uint8)
    e1 = emu.execute(_plan(src, dev, 1024), s)
    assert e1.query() and torch.equal(dev, src)  # landed when execute returned, nobody waited
    e2 = emu.execute(_plan(dev, host, 512), s)
    assert e2.query() and torch.equal(host[:512], src[:512]) and not host[512:].any()
    threaded = emu.new_stream()  # the same plans on a worker thread: the same modeled readings
    t1, t2 = emu.execute(_plan(src, dev, 1024), threaded), emu.execute(_plan(dev, host, 512), threaded)
    t2.wait(10)
    assert (e1.modeled_time, e2.modeled_time) == (t1.modeled_time, t2.modeled_time) and e1.modeled_time > 0
    s.synchronize()
    s.close()
    emu.close()
    assert threading.active_count() == before


def test_an_inline_stream_waits_for_another_streams_event_in_modeled_time():
    emu = get_backend("emu", "emu")
    a, b = emu.new_stream(), emu.inline_stream()
    dev = emu.alloc_device((1 << 20,), torch.uint8)
    host = torch.zeros(1 << 20, dtype=torch.uint8)
    ea = emu.execute(_plan(host, dev, 1 << 20), a)
    b.wait_event(ea)  # blocks the caller until ea completed
    assert ea.query()
    eb = emu.execute(_plan(host, dev, 1 << 10), b)
    assert eb.modeled_time > ea.modeled_time
    emu.close()


def test_an_inline_stream_error_is_sticky_and_reraised():
    b = _FailingBackend(get_backend("emu", "emu").profile)
    _FailingBackend.calls = 0
    dev = b.alloc_device((16,), torch.uint8)
    host = torch.zeros(16, dtype=torch.uint8)
    s = b.inline_stream()
    b.execute(_plan(host, dev, 16), s).wait()
    for _ in range(2):
        ev = b.execute(_plan(host, dev, 16), s)  # the failure is the event's, not execute's
        assert ev.query()
        with pytest.raises(RuntimeError, match="injected link failure"):
            ev.wait(timeout=0)


def test_only_backends_whose_work_is_synchronous_give_inline_streams():
    count = get_backend("count", "emu")
    assert count.runs_inline and count.inline_stream().record().query()
    assert get_backend("emu", "emu").runs_inline
    cuda = backend_class("cuda")
    assert not cuda.runs_inline
    with pytest.raises(ValueError, match="^backend 'cuda': has no inline streams"):
        cuda.inline_stream(object.__new__(cuda))
