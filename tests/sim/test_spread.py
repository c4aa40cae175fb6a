"""Every modeled answer carries its interval: one replay priced across a parameter ensemble (built by
hand here: the profile and copies with perturbed values), the answer word from the TTFT change's
interval, the same keys in replay, sweep, ablate (and conform: tests/conformance/test_reading_targets.py), and the
same JSON twice."""

from __future__ import annotations

import json

import pytest

from conformance.cli.main import main
from hardware_profiles import load_profile
from hicache_ref.sim.fit.derive import with_values
from hicache_ref.sim.ladder.ablate import ablate
from hicache_ref.sim.price import cost, spread, uncertainty
from hicache_ref.sim.run.serial_replay import replay, summary_lines
from hicache_ref.sim.sweep.sweep_l2 import sweep
from hicache_ref.sim.trace.synth import synthesize
from hicache_ref.spec import CacheSpec

REQUESTS = synthesize(60, 2000, 12000, 0.8, sessions=4, seed=5)
SPEC = CacheSpec.of(page_size=64, l1_tokens=8192, l2_tokens=262144, write_policy="write_through", io_backend="kernel")
SPREAD_KEYS = ("answer", "ttft_change_pct", "ttft_change_pct_interval", "net_benefit_seconds_interval",
               "busy_seconds", "busy_seconds_interval")


def l2_path_ensemble(profile, scales):
    """The profile, then copies whose L2 load path costs `scale` x the profile's."""
    return (profile, *(with_values(profile, **{"compute.l2_path_fixed_s": profile.compute.l2_path_fixed_s * s})
                       for s in scales))


@pytest.fixture
def wide(monkeypatch):
    """An ensemble wide enough that its L2 path alone turns the gain into a loss for some members."""
    monkeypatch.setattr(uncertainty, "ensemble", lambda p: l2_path_ensemble(p, (0.0, 0.5, 2, 4, 8, 16, 32, 64)))


@pytest.fixture
def narrow(monkeypatch):
    monkeypatch.setattr(uncertainty, "ensemble", lambda p: l2_path_ensemble(p, (0.9, 0.95, 1.05, 1.1)))


def test_spread_takes_member_0_as_the_central_value_and_says_undecided_across_zero():
    rows = {0: (10.0, 12.0, -5.0), 1: (11.0, 12.0, -2.0), 2: (13.0, 12.0, 4.0), 3: (9.0, 12.0, -9.0)}
    got = spread.spread([0, 1, 2, 3], lambda m: rows[m])
    assert (got["busy_seconds"], got["ttft_change_pct"], got["ensemble_members"]) == (10.0, -5.0, 4)
    assert got["ttft_change_pct_interval"] == list(uncertainty.interval([-5.0, -2.0, 4.0, -9.0]))
    assert got["net_benefit_seconds_interval"] == list(uncertainty.interval([2.0, 1.0, -1.0, 3.0]))
    assert got["answer"] == "undecided"
    assert spread.spread([0, 1, 3], lambda m: rows[m])["answer"] == "gain"
    assert spread.spread([2], lambda m: rows[m])["answer"] == "loss"


def test_a_replay_is_priced_across_the_ensemble(wide):
    fig = replay(SPEC, REQUESTS)
    assert fig["l2_hit_requests"] and fig["ensemble_members"] == 9
    lo, hi = fig["ttft_change_pct_interval"]
    assert lo < fig["ttft_change_pct"] < 0 < hi and fig["answer"] == "undecided"
    assert fig["ttft_change_pct"] == fig["modeled_ttft_change_pct"]  # member 0: the profile's own figures
    assert fig["busy_seconds"] == fig["net_benefit_service"]["total"]
    nlo, nhi = fig["net_benefit_seconds_interval"]
    assert nlo < 0 < fig["net_benefit_seconds"] < nhi
    blo, bhi = fig["busy_seconds_interval"]
    assert blo < fig["busy_seconds"] < bhi
    first = summary_lines(fig)[0]
    assert first.startswith("answer: undecided: modeled TTFT ") and "(5-95% over 9 parameter sets)" in first


@pytest.mark.slow
def test_a_narrow_ensemble_decides(narrow):
    fig = replay(SPEC, REQUESTS)
    lo, hi = fig["ttft_change_pct_interval"]
    assert lo < fig["ttft_change_pct"] < hi < 0 and fig["answer"] == "gain"


@pytest.mark.slow
def test_every_sweep_tier_and_the_answer_at_the_capacity_to_deploy(wide):
    result = sweep(SPEC, REQUESTS, [65536, 131072, 262144], method="replay", workers=2)
    for row in result["tiers"]:
        assert set(SPREAD_KEYS) <= set(row) and row["ensemble_members"] == 9  # priced here, not in the workers
    at = next(r for r in result["tiers"] if r["l2_tokens"] == result["answer_l2_tokens"])
    assert {k: result[k] for k in SPREAD_KEYS} == {k: at[k] for k in SPREAD_KEYS}
    assert result["answer_l2_tokens"] == result["plateau_l2_tokens"]


@pytest.mark.slow
def test_every_ablate_rung_and_the_ladders_answer(wide):
    result = ablate(CacheSpec.of(page_size=64, l1_tokens=8192, l2_tokens=65536, tp=2), REQUESTS, workers=1)
    priced = [r for r in result["steps"] if r["net_benefit_seconds"] is not None]
    assert priced
    for row in priced:
        lo, hi = row["ttft_change_pct_interval"]
        assert lo <= row["ttft_change_pct"] <= hi and row["answer"] in uncertainty.ANSWERS
        assert row["busy_seconds"] == row["service"]["total"]  # member 0 is the rung in its own host state
        nlo, nhi = row["net_benefit_seconds_interval"]
        assert nlo <= row["net_benefit_seconds"] <= nhi and row["ensemble_members"] == 9
    ans = result["answer"]
    assert ans["step"] == priced[-1]["step"] and ans["answer"] == priced[-1]["answer"]


@pytest.mark.slow
def test_the_commands_json_carries_the_answer_and_is_the_same_twice(tmp_path, capsys, wide):
    """replay and ablate in process (the hand-built ensemble reaches them): same bytes twice."""
    from hicache_ref.sim.trace.synth import write_trace

    trace = tmp_path / "t.jsonl"
    write_trace(trace, REQUESTS)
    runs = []
    for _ in range(2):
        assert main(["replay", "--trace", str(trace), "--l1-tokens", "8192", "--l2-tokens", "262144",
                     "--write-policy", "write_through", "--io-backend", "kernel", "--json", "--quiet"]) == 0
        fig = json.loads(capsys.readouterr().out)
        for k in ("wall_seconds", "read_seconds", "tokens_per_second", "max_d2h_enqueue_seconds",
                  "max_h2d_enqueue_seconds"):
            fig.pop(k)
        assert main(["ablate", "--trace", str(trace), "--l1-tokens", "8192", "--l2-tokens", "65536", "--tp", "2",
                     "--json", "--quiet"]) == 0
        lad = json.loads(capsys.readouterr().out)
        runs.append(json.dumps([fig, lad], sort_keys=True))
    assert runs[0] == runs[1]
    fig, lad = json.loads(runs[0])
    assert fig["answer"] == "undecided" and set(SPREAD_KEYS) <= set(fig)
    assert lad["answer"]["answer"] in uncertainty.ANSWERS and set(SPREAD_KEYS) <= set(lad["answer"])
    assert main(["ablate", "--trace", str(trace), "--l1-tokens", "8192", "--l2-tokens", "65536", "--tp", "2",
                 "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"answer: {lad['answer']['answer']}: modeled TTFT ")


def test_an_ensemble_whose_member_0_is_not_the_profile_is_refused(monkeypatch):
    p = load_profile("p800")
    monkeypatch.setattr(uncertainty, "ensemble", lambda prof: (with_values(prof, **{"link.per_launch_us": 11.0}),))
    with pytest.raises(ValueError, match="member 0 must be the profile itself"):
        spread.members(p)
    assert cost.replay_state(0).registered_bytes == 0
