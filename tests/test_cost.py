"""The cost model: least-squares fit, p800's compute model against the seed, penalties, net benefit."""

from __future__ import annotations

import numpy as np
import pytest

from hardware_profiles import load_profile
from hardware_profiles.model import ComputeModel, Penalties
from hicache_ref.sim import cost

SEED_A, SEED_B, SEED_BREAK_EVEN = 0.7791, 13.539e-6, 3000


def test_fit_recovers_a_and_b_within_1pct_from_noisy_points():
    rng = np.random.default_rng(7)
    xs = np.linspace(512, 32768, 40)
    ys = SEED_A + SEED_B * xs + rng.normal(0, 0.004, xs.size)  # 4 ms noise on ~0.8-1.2 s
    fit = cost.fit_line(xs, ys)
    assert fit.a == pytest.approx(SEED_A, rel=0.01)
    assert fit.b == pytest.approx(SEED_B, rel=0.01)
    assert 0.98 < fit.r2 <= 1.0
    assert len(fit.residuals) == 40 and abs(sum(fit.residuals)) < 1e-9  # OLS residuals sum to zero
    assert fit.rmse == pytest.approx(0.004, rel=0.3)


def test_exact_points_fit_exactly():
    fit = cost.fit_line([1, 2, 3], [3, 5, 7])
    assert (fit.a, fit.b, fit.r2) == pytest.approx((1.0, 2.0, 1.0))
    assert fit.at(10) == pytest.approx(21.0)


@pytest.mark.parametrize("xs, ys, arg", [([1], [1], "xs"), ([2, 2], [1, 3], "xs"), ([1, 2], [1], "ys"),
                                         ([1, 2], [1, float("nan")], "xs, ys")])
def test_fit_refuses_bad_points_naming_the_argument(xs, ys, arg):
    with pytest.raises(ValueError, match=f"^{arg}:"):
        cost.fit_line(xs, ys)


def test_p800_model_reproduces_the_seed_fit_and_break_even_within_1pct():
    p = load_profile("p800")
    fit = cost.allhit_fit(p.compute)
    assert fit.a == pytest.approx(SEED_A, rel=0.01) and fit.b == pytest.approx(SEED_B, rel=0.01)
    split = cost.split_allhit(fit.a, p.compute)
    assert split.floor_s == pytest.approx(0.735, abs=0.001) and split.l2_path_s == pytest.approx(0.044, abs=0.001)
    assert cost.break_even_tokens(fit.a, fit.b, p.compute) == pytest.approx(SEED_BREAK_EVEN, rel=0.01)
    assert "derived:" in p.sources["compute.prefill_per_token_s"]  # the arithmetic is in the profile


def test_break_even_unknown_or_never():
    assert cost.break_even_tokens(0.78, 1e-5, ComputeModel(None, None)) is None
    assert cost.break_even_tokens(0.78, 1e-5, ComputeModel(0.7, 5e-6)) is None  # loading never wins
    curve = ComputeModel(None, None, ((0, 0.7), (10_000, 1.0)))  # 30 us/token
    n = cost.break_even_tokens(0.75, 20e-6, curve)
    assert n == pytest.approx(0.05 / 10e-6, rel=0.001)


def test_p800_penalties_reproduce_the_seed():
    pen = load_profile("p800").penalties
    assert cost.registered_penalty_pct(pen, 80 * 10**9) == pytest.approx(20.6, abs=0.01)
    assert cost.registered_penalty_pct(pen, 15 * 10**9) == pytest.approx(8.8, abs=0.01)
    assert cost.registered_penalty_pct(pen, 0) == 0.0  # no host pool registered: no registration slowdown
    assert (cost.numa_penalty_pct(pen, False), cost.numa_penalty_pct(pen, True)) == (11.5, -2.1)
    with pytest.raises(ValueError, match="^registered_bytes:"):
        cost.registered_penalty_pct(pen, -1)


def test_ido_halves_shared_uplink_d2h_unless_ordering_is_relaxed():
    p = load_profile("p800")
    assert cost.d2h_gbps_shared(p.link, p.penalties, 2, "off") == pytest.approx(3.70)
    assert cost.d2h_gbps_shared(p.link, p.penalties, 2, "unknown") == pytest.approx(3.70)
    assert cost.d2h_gbps_shared(p.link, p.penalties, 2, "on") == pytest.approx(7.40)
    assert cost.d2h_gbps_shared(p.link, p.penalties, 1, "off") == pytest.approx(7.40)
    assert cost.d2h_gbps_shared(p.link, Penalties(), 2, "off") is None


def test_net_benefit_subtracts_transfer_and_penalties_and_names_assumptions():
    p = load_profile("p800")
    nb = cost.net_benefit(p, compute_saved_s=10.0, transfer_s=2.0, baseline_s=100.0,
                          registered_bytes=15 * 10**9, numa_local=True)
    assert nb.penalty_pct == pytest.approx(8.8 - 2.1, abs=0.01)
    assert nb.net_s == pytest.approx(10.0 - 2.0 - 6.7, abs=0.01)
    assert "link.per_segment_us" in nb.assumed_inputs and "penalties.numa_local_pct" not in nb.assumed_inputs
    assert cost.net_benefit(p, 1.0, 0.5, 10.0).penalty_s == 0.0
    with pytest.raises(ValueError, match="^transfer_s:"):
        cost.net_benefit(p, 1.0, -0.5, 10.0)


def test_replay_reports_net_benefit_with_assumed_inputs_when_the_profile_has_a_compute_model():
    from hicache_ref.sim.replay import replay
    from hicache_ref.spec import CacheSpec

    fig = replay(CacheSpec.of(profile="p800", l2_tokens=8192), _small_trace(), None)
    parts = fig["net_benefit_compute_saved_seconds"] - fig["net_benefit_transfer_seconds"] \
        - fig["net_benefit_penalty_seconds"]
    assert fig["net_benefit_seconds"] == pytest.approx(parts)
    # unlimited L1: every hit is an L1 hit, which an L1-only cache gets too: HiCache saves no compute
    assert fig["net_benefit_compute_saved_seconds"] == fig["modeled_prefill_seconds_saved"] == 0.0
    assert fig["prefix_cache_compute_saved_seconds"] > 0
    assert "link.per_segment_us" in fig["net_benefit_assumed_inputs"]
    assert fig["net_benefit_registered_bytes"] > 0 and "is held" in fig["net_benefit_reason"]
    none = replay(CacheSpec.of(profile="h200"), _small_trace(), None)
    assert none["net_benefit_seconds"] is None and "compute model" in none["net_benefit_reason"]


def _small_trace():
    from hicache_ref.sim.trace import TraceRequest

    return [TraceRequest(timestamp=i, input_length=4096, output_length=1, hash_ids=tuple(range(64)))
            for i in range(3)]


def _result(n, l1, l2, l3=0):
    from hicache_ref.core.cache import RequestResult

    return RequestResult(n, l1, l2, 0, n, False, 0, l3)


def test_compute_saved_counts_only_what_l2_hits_save_beyond_an_l1_only_cache():
    from hicache_ref.sim.figures import add_saved as _add_saved

    compute = ComputeModel(0.5, 1e-4)  # prefill(n) = 0.5 + 1e-4 n
    res = _result(4096, 1024, 2048)
    # beyond L1: prefill(4096 - 1024) - prefill(4096 - 1024 - 2048) = 0.3072 + 0.5 - (0.1024 + 0.5)
    assert _add_saved(0.0, compute, res) == pytest.approx(0.2048)
    # every hit, over no cache: prefill(4096) - prefill(1024) = 0.4096 - 0.1024
    assert _add_saved(0.0, compute, res, over_l1=False) == pytest.approx(0.3072)
    only_l1 = _result(4096, 4096, 0)
    assert _add_saved(1.0, compute, only_l1) == 1.0
    # L3 hits are a lower tier too: 1024 L2 + 1024 L3 tokens save what 2048 L2 tokens do
    assert _add_saved(0.0, compute, _result(4096, 1024, 1024, 1024)) == pytest.approx(0.2048)


def test_replay_net_benefit_counts_the_l2_hit_and_not_the_l1_hit():
    from hicache_ref.sim.replay import replay
    from hicache_ref.sim.trace import TraceRequest
    from hicache_ref.spec import CacheSpec

    a, b = tuple(range(8)), tuple(range(100, 108))  # two 4096-token documents (8 blocks of 512)
    reqs = [TraceRequest(timestamp=i, input_length=4096, output_length=1, hash_ids=h) for i, h in enumerate([a, a, b, a])]
    fig = replay(CacheSpec.of(profile="p800", l1_tokens=4096, l2_tokens=16384, write_policy="write_through"), reqs, None)
    # the second a hits L1 (4096 tokens), b evicts a from L1, the last a loads all 4096 back from L2
    assert (fig["l1_hit_tokens"], fig["l2_hit_tokens"]) == (4096, 4096)
    whole = 0.735 + 2.8239e-05 * 4096  # p800's prefill(4096); prefill(0) = 0
    assert fig["net_benefit_compute_saved_seconds"] == pytest.approx(whole)  # the L2 hit only
    assert fig["prefix_cache_compute_saved_seconds"] == pytest.approx(2 * whole)  # both hits, over no cache
    assert fig["net_benefit_seconds"] == pytest.approx(
        whole - fig["net_benefit_transfer_seconds"] - fig["net_benefit_penalty_seconds"])


def test_registered_penalty_is_held_at_the_nearest_measured_size_not_extrapolated():
    p = load_profile("p800")
    pen = p.penalties
    # inside 15-80 GB the line: 6.0769 + 0.181538 * 40
    assert cost.registered_penalty_pct(pen, 40 * 10**9) == pytest.approx(6.0769 + 0.181538 * 40, abs=0.01)
    assert cost.registered_penalty_held(40 * 10**9) is None
    assert cost.registered_penalty_pct(pen, 5 * 10**9) == pytest.approx(8.8, abs=0.01)  # held at 15 GB
    assert cost.registered_penalty_pct(pen, 200 * 10**9) == pytest.approx(20.6, abs=0.01)  # held at 80 GB
    assert "15 GB figure is held" in cost.registered_penalty_held(5 * 10**9)
    assert "80 GB figure is held" in cost.registered_penalty_held(200 * 10**9)
    held = cost.net_benefit(p, 1.0, 0.5, 10.0, registered_bytes=200 * 10**9)
    inside = cost.net_benefit(p, 1.0, 0.5, 10.0, registered_bytes=40 * 10**9)
    assert cost.REGISTERED_HELD_INPUT in held.assumed_inputs
    assert cost.REGISTERED_HELD_INPUT not in inside.assumed_inputs


def test_an_empty_replay_has_no_net_benefit_figure():
    from hicache_ref.sim.replay import replay, summary_lines
    from hicache_ref.spec import CacheSpec

    for profile in ("p800", "emu"):
        fig = replay(CacheSpec.of(profile=profile), [], None)
        assert fig["net_benefit_seconds"] is None and "no request replayed" in fig["net_benefit_reason"]
        assert any(line.startswith("net benefit: not modeled (no request") for line in summary_lines(fig))
    # emu has no compute model: a non-empty replay says so, as before
    emu = replay(CacheSpec.of(profile="emu"), _small_trace(), None)
    assert emu["net_benefit_seconds"] is None and "compute model" in emu["net_benefit_reason"]


def test_a_served_replay_does_not_claim_the_profile_is_missing():
    from hicache_ref.sim.replay import summary_lines
    from hicache_ref.sim.serving import replay_served
    from hicache_ref.spec import CacheSpec

    fig = replay_served(CacheSpec.of(profile="p800", l2_tokens=8192, concurrency=2), _small_trace())
    line = [x for x in summary_lines(fig) if x.startswith("net benefit")]
    assert line == ["net benefit: not modeled (not computed by a served replay (--concurrency); the serial "
                    "replay gives it)"]
