"""One baseline, one sign: replay, sweep, ablate and conform's pricing take the same configuration
against the same HiCache off (hicache_ref.sim.run.baseline) and give the same TTFT change and net benefit."""

from __future__ import annotations

import json

import pytest

from hardware_profiles import load_profile
from hicache_ref.sim.fit import modeled_readings as readings
from hicache_ref.sim.ladder.ablate import ablate
from hicache_ref.sim.ladder.scenario import Runs, state
from hicache_ref.sim.run.baseline import is_off, off_spec
from hicache_ref.sim.run.replay_dispatch import run_replay
from hicache_ref.sim.sweep.sweep_l2 import sweep
from hicache_ref.sim.trace.reader import find_trace, read_trace
from hicache_ref.spec import CacheSpec

L1, L2 = 131_072, 524_288
# ablate's "numa" rung: layer_first (kernel copies), daemon threads, THP, NUMA-local pools with IDO,
# per-insert hit counting, no ghost list; every host fix on, which is how replay prices a run
RUNG = "numa"
CONFIG = dict(l1_tokens=L1, l2_tokens=L2, host_layout="layer_first", io_backend="kernel",
              write_policy="write_through_selective", hit_count="per_insert", ghost=False, profile="p800")


@pytest.fixture(scope="module")
def requests():
    return read_trace(find_trace("synthetic_trace.jsonl"), 160)


def _rung(result: dict, step: str = RUNG) -> dict:
    return next(r for r in result["steps"] if r["step"] == step)


def _close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("extra", "step"), [({}, RUNG), (dict(tp=2, concurrency=4), RUNG),
                                             (dict(tp=2, concurrency=4, shared_host=True), "tp_shared")],
                         ids=["serial", "tp2-served", "tp2-shared-served"])
@pytest.mark.slow
def test_replay_and_ablate_give_one_ttft_change_and_net_benefit(requests, extra, step):
    """--tp with --concurrency runs in both; a shared host pool is ablate's tp_shared rung."""
    spec = CacheSpec.of(**CONFIG, **extra)
    fig = run_replay(spec, requests)
    rung = _rung(ablate(spec.replace(shared_host=False), requests), step)
    assert fig["hit_rate"] == rung["hit_rate"]
    assert fig["net_benefit_seconds"] is not None and rung["net_benefit_seconds"] is not None
    assert _close(fig["net_benefit_seconds"], rung["net_benefit_seconds"])
    assert _close(fig["modeled_ttft_change_pct"], rung["ttft_change_pct"])
    assert _close(fig["ttft_change_seconds"], rung["ttft_change_seconds"])
    # the same sign, and it is a real change (a test of two zeros would pass on anything)
    assert fig["net_benefit_seconds"] != 0


@pytest.mark.slow
def test_sweep_and_conform_pricing_agree_with_replay(requests):
    spec = CacheSpec.of(**CONFIG)
    fig = run_replay(spec, requests)
    row = sweep(spec, requests, [L2], method="replay", workers=1)["tiers"][0]
    assert _close(row["net_benefit_seconds"], fig["net_benefit_seconds"])
    assert _close(row["modeled_ttft_change_pct"], fig["modeled_ttft_change_pct"])
    # conform's answer prices a ladder state against HiCache off through readings.workload_change_pct
    profile = load_profile("p800")
    runs = Runs(spec.replace(l2_tokens=None), requests, 1)
    st = state(host_layout="layer_first", submission="daemon", host_pages="thp", numa="local", ido=True)
    gb = L2 * spec.geometry.token_bytes / 1e9 + 1e-9  # readings size L2 in decimal GB per card
    assert readings.l2_tokens(gb) == L2
    change = readings.workload_change_pct(profile, runs, st, gb, {"hicache_off": state(hicache=False)})
    assert _close(change, fig["modeled_ttft_change_pct"])


def test_hicache_off_is_l1_alone_and_prices_to_zero(requests):
    """A replay of HiCache off is its own baseline: no change, no net benefit; the off spec keeps L1,
    geometry and serving and drops L2, L3 and the TP group."""
    spec = CacheSpec.of(**CONFIG, tp=2, concurrency=4)
    off = off_spec(spec)
    assert is_off(off) and off.tiers.l2_tokens == 0 and off.tp.ranks is None and off.storage.l3 is None
    assert off.tiers.l1_tokens == L1 and off.serving.concurrency == 4 and off.geometry == spec.geometry
    fig = run_replay(off, requests)
    assert fig["net_benefit_seconds"] == 0 and fig["modeled_ttft_change_pct"] == 0
    assert fig["hicache_off"]["hit_rate"] == fig["hit_rate"]


def test_replay_prices_against_a_separate_l1_alone_run_not_its_own_l1_hits(requests):
    """The L1 of a HiCache run holds what HiCache loaded back; counting only its L1 hits is not what a
    server without HiCache would hit. The baseline's hit rate is the L1-alone replay's."""
    spec = CacheSpec.of(**CONFIG)
    fig = run_replay(spec, requests)
    alone = run_replay(off_spec(spec), requests)
    assert fig["hicache_off"]["hit_rate"] == alone["hit_rate"]
    assert _close(fig["hicache_off"]["busy_seconds"] - fig["net_benefit_seconds"], fig["net_benefit_service"]["total"])
    json.dumps(fig)  # the new keys are JSON
