"""Count backend: prices plans exactly as emu's modeled clock does, and moves no bytes."""

import numpy as np
import pytest
import torch

from hal.backend import available_backends, backend_class, get_backend
from hal.backends.count import CountBackend
from hal.transfer.layouts import KVGeometry
from hal.transfer.plan import CopyGroup, Segments, TransferPlan, plan_pool_transfer


def _plan(src, dst, n, pieces=1):
    step = n // pieces
    offs = np.arange(pieces, dtype=np.int64) * step * 2  # gaps: one segment per piece
    seg = Segments(offs, offs, np.full(pieces, step, dtype=np.int64))
    return TransferPlan("test", [CopyGroup(src, dst, seg)])


def test_count_is_a_builtin_that_is_always_available():
    assert "count" in available_backends()
    assert backend_class("count") is CountBackend
    assert CountBackend.probe() == (True, "")
    caps = get_backend("count").capabilities()
    assert caps.available and caps.modeled_clock and not caps.moves_bytes and not caps.host_registration
    assert get_backend("emu").capabilities().moves_bytes


def test_alloc_device_gives_meta_tensors_without_storage():
    t = get_backend("count").alloc_device((1 << 20, 1 << 20), torch.bfloat16)  # 2 TiB, allocated instantly
    assert t.device.type == "meta" and t.shape == (1 << 20, 1 << 20) and t.dtype == torch.bfloat16


@pytest.mark.parametrize("profile", ["emu", "p800"])
@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct"])
@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_symbolic_plans_cost_the_same_modeled_seconds_as_on_emu(profile, layout, direction):
    geom = KVGeometry("mla", 6, 1, 64, torch.bfloat16, 16)
    tokens = np.random.default_rng(1).permutation(256)[:96].astype(np.int64)
    count, emu = get_backend("count", profile), get_backend("emu", profile)
    for launches in (1, 6):
        plan = plan_pool_transfer(layout, geom, 256, tokens, tokens, direction)
        plan.launches = launches
        assert count.model_seconds(plan) == emu.model_seconds(plan)
        ev = count.execute(plan, count.new_stream())
        assert ev.query() and ev.modeled_time == emu.model_seconds(plan)


def test_materialized_plans_match_emu_on_the_clock_and_write_nothing():
    count, emu = get_backend("count", "p800"), get_backend("emu", "p800")
    host = torch.full((1 << 16,), 7, dtype=torch.uint8)
    cs, es = count.new_stream(), emu.new_stream()
    e_dev = emu.alloc_device((1 << 16,), torch.uint8)
    c_dev = count.alloc_device((1 << 16,), torch.uint8)
    for n, pieces in ((1 << 15, 1), (1 << 15, 64), (1 << 14, 512)):
        cp, ep = _plan(host, c_dev, n, pieces), _plan(host, e_dev, n, pieces)
        c_ev, e_ev = count.execute(cp, cs), emu.execute(ep, es)
        e_ev.wait()
        assert cp.direction == ep.direction == "h2d"
        assert c_ev.modeled_time == e_ev.modeled_time
    back = torch.zeros(1 << 16, dtype=torch.uint8)
    plan = _plan(c_dev, back, 1 << 15, 8)
    ev = count.execute(plan, cs)
    assert plan.direction == "d2h" and ev.modeled_time > c_ev.modeled_time
    assert not back.any() and bool((host == 7).all())  # nothing moved either way
    emu.close()


def test_waiting_on_an_event_orders_modeled_time():
    count = get_backend("count", "p800")
    a, b = count.new_stream(), count.new_stream()
    geom = KVGeometry("mla", 4, 1, 64, torch.bfloat16, 16)
    tokens = np.arange(64, dtype=np.int64)
    ev = count.execute(plan_pool_transfer("layer_first", geom, 64, tokens, tokens, "d2h"), a)
    b.wait_event(ev)
    assert b.record().modeled_time == ev.modeled_time > 0
    assert count.default_stream().record().modeled_time == 0.0


def test_bad_plans_and_streams_are_refused():
    count = get_backend("count")
    dev = count.alloc_device((16,), torch.uint8)
    with pytest.raises(ValueError, match="outside"):
        count.execute(_plan(torch.zeros(8, dtype=torch.uint8), dev, 16))
    with pytest.raises(ValueError, match="stream"):
        count.execute(_plan(torch.zeros(16, dtype=torch.uint8), dev, 16), get_backend("emu").new_stream())


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_a_totals_only_plan_prices_as_the_plan_it_stands_for_and_only_count_runs_it(direction):
    geom = KVGeometry("mla", 6, 1, 64, torch.bfloat16, 16)
    tokens = np.random.default_rng(2).permutation(256)[:96].astype(np.int64)
    full = plan_pool_transfer("layer_first", geom, 256, tokens, tokens[::-1].copy(), direction)
    stand_in = TransferPlan.counted(full.op, full.direction, full.launches, None, full.nbytes, full.num_segments)
    assert (stand_in.nbytes, stand_in.num_segments) == (full.nbytes, full.num_segments) == stand_in.totals
    assert full.totals is None  # a plan of segment arrays runs
    count = get_backend("count", "p800")
    assert count.model_seconds(stand_in) == count.model_seconds(full) > 0
    assert count.execute(stand_in).modeled_time == count.model_seconds(full)
    with pytest.raises(ValueError, match="totals-only plan .* cannot run on emu"):
        get_backend("emu", "p800").execute(stand_in)  # it would copy nothing and look done
