"""Net benefit: the least-squares fit, prefill with its pair term, the all-hit request and break-even on
p800 against the seed, re-pricing a run from its moments, and the replay JSON's net-benefit keys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import hardware_profiles
from hardware_profiles import load_profile
from hardware_profiles.cost_models import ComputeModel
from hicache_ref.sim.fit.derive import with_values
from hicache_ref.sim.price import cost, spread
from hicache_ref.sim.price import mechanisms as mech
from hicache_ref.sim.price.prefill_model import prefill_from_moments
from hicache_ref.sim.run.replay_figures import ComputeTally
from hicache_ref.sim.run.serial_replay import replay, summary_lines
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.spec import CacheSpec

SEED_A, SEED_B, SEED_BREAK_EVEN = 0.7791, 13.539e-6, 3000
LAYERS, TOKEN_BYTES = 78, 89_856  # the seed geometry: MLA latent, kv_dim 576, bf16


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


def test_r2_is_one_minus_the_residual_share_of_the_variance():
    xs, ys = [0, 1, 2, 3, 4], [1.0, 0.0, 3.0, 2.0, 5.0]  # a poor line: r2 25/37, pinned independently
    fit = cost.fit_line(xs, ys)
    assert fit.r2 == pytest.approx(float(np.corrcoef(xs, ys)[0, 1] ** 2), rel=1e-12)
    assert fit.r2 == pytest.approx(25 / 37, rel=1e-12)
    assert cost.fit_line([1, 2, 3], [4, 4, 4]).r2 == 1.0  # a flat line fitted exactly
    assert cost.fit_line([1, 2, 3], [3, 1, 3]).r2 == 0.0  # the slope explains nothing


@pytest.mark.parametrize("xs, ys, arg", [([1], [1], "xs"), ([2, 2], [1, 3], "xs"), ([1, 2], [1], "ys"),
                                         ([1, 2], [1, float("nan")], "xs, ys")])
def test_fit_refuses_bad_points_naming_the_argument(xs, ys, arg):
    with pytest.raises(ValueError, match=f"^{arg}:"):
        cost.fit_line(xs, ys)


# prefill: fixed + a (n - c) + b (n^2 - c^2)

def test_caching_c_tokens_saves_a_c_plus_b_c_squared_whatever_the_prompt():
    a, b = 2e-5, 3e-9
    m = ComputeModel(0.5, a, prefill_per_token_pair_s=b)
    for n in (4096, 40_960):
        assert m.prefill_seconds(n) == pytest.approx(0.5 + a * n + b * n * n)
        for c in (0, 1024, n // 2):
            assert m.prefill_seconds(n) - m.prefill_seconds(n, c) == pytest.approx(a * c + b * c * c)
        assert m.prefill_seconds(n, n) == 0.5  # every prompt pays the fixed part, even all cached
    # the pair term makes prefill superlinear: twice the prompt costs more than twice the tokens' work
    assert m.prefill_seconds(8192) - 0.5 > 2 * (m.prefill_seconds(4096) - 0.5)
    assert ComputeModel(0.5, a).prefill_seconds(8192) - 0.5 == pytest.approx(2 * (ComputeModel(0.5, a)
                                                                                 .prefill_seconds(4096) - 0.5))
    assert m.prefill_seconds(0) == 0.0
    with pytest.raises(ValueError, match="^cached: "):
        m.prefill_seconds(10, 11)


def test_a_curve_compute_model_prices_the_uncached_part_of_its_curve():
    m = ComputeModel(None, None, ((0, 0.7), (10_000, 1.0)))  # 30 us/token above a 0.7 s floor
    assert m.known
    assert m.prefill_seconds(5000) == pytest.approx(0.85)
    assert m.prefill_seconds(5000, 2000) == pytest.approx(0.7 + 0.15 - 0.06)
    assert ComputeModel(None, None).prefill_seconds(100) is None and not ComputeModel(None, None).known


def test_moments_reprice_a_run_under_other_compute_parameters():
    from hicache_ref.core.cache import RequestResult

    results = [RequestResult(n, l1, l2, 0, n, False, 0, l3) for n, l1, l2, l3 in
               ((4096, 1024, 2048, 0), (8192, 0, 0, 0), (3000, 3000, 0, 0), (5000, 512, 512, 1024))]
    first, other = ComputeModel(0.5, 1e-4, prefill_per_token_pair_s=1e-9), ComputeModel(0.8, 2e-5,
                                                                                       prefill_per_token_pair_s=4e-9)
    tally = ComputeTally(first)
    for r in results:
        tally.add(r)
    assert prefill_from_moments(first, tally.moments["compute"]) == pytest.approx(tally.compute)
    assert prefill_from_moments(first, tally.moments["l1_only"]) == pytest.approx(tally.l1_only)
    assert prefill_from_moments(first, tally.moments["no_cache"]) == pytest.approx(tally.no_cache)
    # the same run under other parameters, without replaying it; L3 hits count as lower-tier hits
    cached = [min(r.input_tokens, r.l1_hit_tokens + r.l2_hit_tokens + r.l3_hit_tokens) for r in results]
    assert prefill_from_moments(other, tally.moments["compute"]) == pytest.approx(
        sum(other.prefill_seconds(r.input_tokens, c) for r, c in zip(results, cached, strict=True)))
    assert tally.l2_hit_requests == 2  # the requests that loaded from L2 or L3


# the all-hit request and break-even on p800, against the seed

def test_p800_all_hit_fit_and_break_even_reproduce_the_seed_within_1pct():
    from hardware_profiles.measured_readings import load_readings
    from hicache_ref.sim.ladder.seed_scenario import seed_host_state

    p = load_profile("p800")
    r = load_readings(p)
    # in the state the seed measured it: one card, every host fix, its 75 GB pool registered
    measured = seed_host_state(r.states[r.reading("allhit_slope").state], r.scenario, r.scenario["l2_gb_per_card"], p)
    pts = [(n, cost.allhit_seconds(p, n, LAYERS, TOKEN_BYTES, measured)) for n in cost.ALLHIT_TOKENS]
    fit = cost.fit_line([n for n, _ in pts], [s for _, s in pts])
    assert fit.a == pytest.approx(SEED_A, rel=0.01) and fit.b == pytest.approx(SEED_B, rel=0.01)
    # with nothing registered the same loads run faster: registered size is itself a cost
    assert cost.allhit_fit(p, LAYERS, TOKEN_BYTES).b < fit.b
    assert cost.break_even_tokens(p, LAYERS, TOKEN_BYTES) == pytest.approx(SEED_BREAK_EVEN, rel=0.01)
    n = cost.break_even_tokens(p, LAYERS, TOKEN_BYTES)
    # there, loading the prompt's KV and recomputing it cost the same
    assert cost.allhit_seconds(p, round(n), LAYERS, TOKEN_BYTES) == pytest.approx(p.compute.prefill_seconds(round(n)),
                                                                               abs=1e-4)


def test_all_hit_time_is_the_fixed_part_l2_path_and_a_layer_first_load():
    p = load_profile("p800")
    n = 16_384
    load = mech.Traffic(bytes=n * TOKEN_BYTES, launches=LAYERS, items=n * LAYERS, kernel=True)
    expect = (p.compute.prefill_fixed_s + p.compute.l2_path_fixed_s + mech.submission_seconds(p, load)
              + n * TOKEN_BYTES / (p.link.h2d_gbps * 1e9) + n * LAYERS * p.link.kernel_per_item_us * 1e-6)
    assert cost.allhit_seconds(p, n, LAYERS, TOKEN_BYTES) == pytest.approx(expect)
    # remote NUMA memory slows the load by its bandwidth factor
    remote = cost.allhit_seconds(p, n, LAYERS, TOKEN_BYTES, mech.HostState(numa="remote"))
    assert remote - expect == pytest.approx(n * TOKEN_BYTES / (p.link.h2d_gbps * 1e9)
                                            * (1 / p.host_costs.numa_remote_bw_factor - 1))


def test_break_even_unknown_never_or_from_a_curve():
    p = load_profile("p800")
    with pytest.raises(mech.Unpriced, match="compute model"):
        cost.break_even_tokens(load_profile("emu"), LAYERS, TOKEN_BYTES)
    cheap = with_values(p, **{"compute.prefill_per_token_s": 1e-6, "compute.prefill_per_token_pair_s": 0.0})
    assert cost.break_even_tokens(cheap, LAYERS, TOKEN_BYTES) is None  # loading never wins
    # a prefill dearer than loading from the first token: break-even 0 (never a negative prompt length)
    slow = with_values(p, **{"compute.prefill_per_token_s": 1.0})
    assert cost.break_even_tokens(slow, LAYERS, TOKEN_BYTES) == 0.0
    curve = with_values(p, **{"compute.prefill_curve": ((0, 0.735), (10_000, 1.035))})  # 30 us/token
    fit = cost.allhit_fit(p, LAYERS, TOKEN_BYTES)  # the all-hit time is linear in n
    assert cost.break_even_tokens(curve, LAYERS, TOKEN_BYTES) == pytest.approx((fit.a - 0.735) / (30e-6 - fit.b),
                                                                              abs=1.0)


# the replay JSON

def _doc_trace():
    a, b = tuple(range(8)), tuple(range(100, 108))  # two 4096-token documents (8 blocks of 512)
    return [TraceRequest(timestamp=i, input_length=4096, output_length=1, hash_ids=h)
            for i, h in enumerate([a, a, b, a])]


def _small_trace():
    return [TraceRequest(timestamp=i, input_length=4096, output_length=1, hash_ids=tuple(range(64)))
            for i in range(3)]


def test_replay_net_benefit_is_l1_only_busy_minus_this_runs_busy():
    fig = replay(CacheSpec.of(profile="p800", l1_tokens=4096, l2_tokens=16384, write_policy="write_through"),
                 _doc_trace(), None)
    # the second a hits L1, b evicts a from L1, the last a loads all 4096 tokens back from L2
    assert (fig["l1_hit_tokens"], fig["l2_hit_tokens"], fig["l2_hit_requests"]) == (4096, 4096, 1)
    c = load_profile("p800").compute
    saved = c.prefill_per_token_s * 4096 + c.prefill_per_token_pair_s * 4096 ** 2  # prefill(4096) - prefill(4096, 4096)
    assert fig["net_benefit_compute_saved_seconds"] == pytest.approx(saved)
    svc = fig["net_benefit_service"]
    assert fig["modeled_prefill_l1_only_seconds"] - svc["total"] == pytest.approx(fig["net_benefit_seconds"])
    assert fig["net_benefit_seconds"] == pytest.approx(saved - fig["net_benefit_transfer_seconds"])
    assert fig["net_benefit_transfer_seconds"] == pytest.approx(
        svc["l2_path"] + svc["load"] + svc["hold"] + svc["interference"]) and svc["load"] > 0
    assert svc["l2_path"] == pytest.approx(c.l2_path_fixed_s)  # one request loaded from L2
    # 4096 tokens is above break-even: loading them costs less than recomputing them (the backups
    # of both documents are what the run pays on top)
    assert svc["l2_path"] + svc["load"] < saved and svc["hold"] + svc["interference"] > 0
    assert fig["net_benefit_host_state"]["submission"] == "daemon"  # the replay prices every host fix on
    assert fig["modeled_ttft_seconds"] == pytest.approx(svc["total"] / 4)  # serial: busy / requests
    assert fig["modeled_ttft_change_pct"] == pytest.approx(
        (svc["total"] / fig["modeled_prefill_l1_only_seconds"] - 1) * 100)
    assert set(fig["net_benefit_assumed_inputs"]) == {"host_costs.ido_shared_d2h_factor", "link.d2h_gbps",
                                                      "link.per_launch_us"}
    line = [x for x in summary_lines(fig) if x.startswith("net benefit")]
    assert len(line) == 1 and f"{fig['net_benefit_seconds']:+.3f} s" in line[0]


def test_with_only_l1_hits_hicache_saves_no_compute_and_pays_for_its_backups():
    fig = replay(CacheSpec.of(profile="p800", l2_tokens=8192), _small_trace(), None)  # unlimited L1
    assert fig["net_benefit_compute_saved_seconds"] == fig["modeled_prefill_seconds_saved"] == 0.0
    assert fig["prefix_cache_compute_saved_seconds"] > 0  # the L1 hits save over no cache, not over L1 alone
    assert fig["d2h_bytes"] > 0 and fig["net_benefit_seconds"] < 0


def test_a_served_replay_prices_its_busy_seconds_under_its_concurrency():
    from hicache_ref.sim.run.served_replay import replay_served

    fig = replay_served(CacheSpec.of(profile="p800", l1_tokens=4096, l2_tokens=16384, write_policy="write_through",
                                     concurrency=2), _doc_trace())
    assert fig["net_benefit_seconds"] is not None
    assert fig["modeled_ttft_seconds"] == pytest.approx(2 * fig["net_benefit_service"]["total"] / fig["requests"])
    # HiCache off: the served L1-alone replay, its busy seconds under the same concurrency
    assert fig["modeled_ttft_l1_only_seconds"] == pytest.approx(2 * fig["hicache_off"]["busy_seconds"] / fig["requests"])


def test_no_profile_no_compute_model_or_no_request_gives_no_net_benefit_and_says_why():
    fig = replay(CacheSpec.of(profile="p800", l2_tokens=8192), _small_trace(), None)
    none = cost.replay_figures(None, fig, fig)
    assert none == {"net_benefit_seconds": None, "net_benefit_reason": "no profile", **dict.fromkeys(spread.KEYS)}
    unpriced = cost.replay_figures(load_profile("p800"), fig, None)  # the caller prices it against its off run
    assert unpriced["net_benefit_seconds"] is None and "HiCache-off run" in unpriced["net_benefit_reason"]
    emu = replay(CacheSpec.of(profile="emu"), _small_trace(), None)
    assert emu["net_benefit_seconds"] is None and "compute model" in emu["net_benefit_reason"]
    assert [x for x in summary_lines(emu) if x.startswith("net benefit")][0].startswith("net benefit: not modeled")
    for profile in ("p800", "emu"):
        empty = replay(CacheSpec.of(profile=profile), [], None)
        assert empty["net_benefit_seconds"] is None and "no request replayed" in empty["net_benefit_reason"]
        assert any(x.startswith("net benefit: not modeled (no request") for x in summary_lines(empty))


@pytest.mark.slow
def test_a_profile_missing_a_parameter_the_run_needs_names_it_in_the_replay(tmp_path):
    doc = yaml.safe_load((Path(hardware_profiles.__file__).parent / "p800.yaml").read_text())
    doc["compute"]["l2_path_fixed_s"] = "unknown"
    path = tmp_path / "nopath.yaml"
    path.write_text(yaml.safe_dump(doc))
    fig = replay(CacheSpec.of(profile=str(path), l1_tokens=4096, l2_tokens=16384, write_policy="write_through"),
                 _doc_trace(), None)
    assert fig["net_benefit_seconds"] is None and "compute.l2_path_fixed_s" in fig["net_benefit_reason"]
    unhit = replay(CacheSpec.of(profile=str(path), l2_tokens=8192), _small_trace(), None)
    assert unhit["net_benefit_seconds"] is not None  # no request loaded from L2: nothing needs that key


@pytest.mark.slow
def test_a_curve_profile_prices_a_replay_from_its_own_tally(tmp_path):
    doc = yaml.safe_load((Path(hardware_profiles.__file__).parent / "p800.yaml").read_text())
    doc["compute"]["prefill_curve"] = {"value": [[0, 0.735], [10_000, 1.035]], "source": "assumed: test"}
    path = tmp_path / "curve.yaml"
    path.write_text(yaml.safe_dump(doc))
    fig = replay(CacheSpec.of(profile=str(path), l1_tokens=4096, l2_tokens=16384, write_policy="write_through"),
                 _doc_trace(), None)
    # the curve, not the linear + pair terms: the L2 hit saves curve(4096) - curve(0) = 30 us x 4096
    assert fig["net_benefit_compute_saved_seconds"] == pytest.approx(30e-6 * 4096)
    assert fig["net_benefit_service"]["compute"] == pytest.approx(fig["modeled_prefill_compute_seconds"])
    assert fig["net_benefit_seconds"] == pytest.approx(fig["modeled_prefill_l1_only_seconds"]
                                                       - fig["net_benefit_service"]["total"])


# what the fit, the traffic and the L3 link hand on, key by key

def test_a_fits_json_is_its_line_its_quality_and_its_points():
    fit = cost.fit_line([0, 1, 2, 3], [1.0, 2.0, 2.0, 5.0])  # y = 0.7 + 1.2 x: SS_res 1.8 of SS_tot 9
    j = fit.to_json()
    assert set(j) == {"a", "b", "r2", "rmse", "points", "xs", "ys", "residuals"}
    assert (j["a"], j["b"], j["r2"], j["rmse"]) == pytest.approx((0.7, 1.2, 0.8, 0.45 ** 0.5))
    assert (j["points"], j["xs"], j["ys"]) == (4, [0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 2.0, 5.0])
    assert j["residuals"] == pytest.approx([0.3, 0.1, -1.1, 0.7])
    assert cost.fit_line([0, 1], [1, 3]).at(2) == pytest.approx(5.0)  # two distinct x are enough


def test_fit_refusals_say_what_came():
    with pytest.raises(ValueError) as e:
        cost.fit_line(list(range(3)), [1, 2])
    assert str(e.value) == "ys: 2 values for 3 xs"
    with pytest.raises(ValueError) as e:
        cost.fit_line([5] * 10, list(range(10)))
    assert str(e.value) == f"xs: need at least two distinct x values, got {[5.0] * 8}"  # the first 8
    with pytest.raises(ValueError) as e:
        cost.fit_line([1, 2], [1, float("inf")])
    assert str(e.value) == "xs, ys: every value must be finite"


def test_break_even_is_the_first_whole_prompt_where_loading_wins():
    p = load_profile("p800")
    n = round(cost.break_even_tokens(p, LAYERS, TOKEN_BYTES))

    def loading_costs_more(k):
        return cost.allhit_seconds(p, k, LAYERS, TOKEN_BYTES) > p.compute.prefill_seconds(k)

    assert loading_costs_more(n - 1) and not loading_costs_more(n)  # to half a token
    assert cost.break_even_tokens(p, LAYERS, TOKEN_BYTES, max_tokens=n - 2) is None  # not below max_tokens


def test_the_assumed_inputs_are_the_keys_asked_that_the_profile_assumes_sorted_once():
    p = load_profile("p800")
    assumed = set(p.assumptions())
    asked = ("link.per_launch_us", "link.d2h_gbps", "link.per_launch_us", "compute.prefill_fixed_s")
    assert {"link.per_launch_us", "link.d2h_gbps"} <= assumed and "compute.prefill_fixed_s" not in assumed
    assert cost.assumed_inputs(p, asked) == ("link.d2h_gbps", "link.per_launch_us")
    assert cost.assumed_inputs(p) == tuple(sorted(assumed & {*cost.COMPUTE_KEYS, *cost.TRANSFER_KEYS,
                                                             *cost.HOST_KEYS}))


@pytest.mark.parametrize("io_backend, kernel", [("kernel", True), ("direct", False), (None, False)])
def test_a_directions_traffic_is_the_replays_counts_with_an_item_per_token_and_layer(io_backend, kernel):
    fig = {"geometry": {"layers": 3}, "h2d_bytes": 1000, "h2d_segments": 7, "h2d_launches": 5, "h2d_tokens": 11,
           "d2h_bytes": 1, "d2h_segments": 1, "d2h_launches": 1, "d2h_tokens": 1}
    if io_backend:
        fig["io_backend"] = io_backend
    assert cost.traffic(fig, "h2d") == mech.Traffic(bytes=1000, segments=7, launches=5, items=33, kernel=kernel)


def test_an_l3_runs_link_seconds_are_its_reads_writes_and_the_shared_uplink():
    p = load_profile("p800")
    state = mech.HostState()
    gb = 10**9
    fig = dict(l3="model:", d2h_bytes=10 * gb, l3_bytes_read=40 * gb, l3_bytes_written=8 * gb, l3_pages_read=1000,
               l3_pages_written=300, l3_prefetches=10, l3_write_batches=4, l3_modeled_stall_seconds=0.5)
    read = mech.l3_seconds(p, "read", 1000, 40 * gb, 10)
    write = mech.l3_seconds(p, "write", 300, 8 * gb, 4)
    shared = mech.shared_uplink_seconds(p, 10 * gb, 48 * gb, read + write, state)
    assert read > 0 and write > 0 and shared > 0
    assert cost.l3_link_figures(p, fig, state) == {
        "l3_link_read_seconds": read, "l3_link_write_seconds": write, "l3_shared_uplink_seconds": shared,
        "l3_service_seconds": mech.l3_service(p, 0.5, shared)}
    unbatched = {k: v for k, v in fig.items() if k != "l3_write_batches"}  # a store that does not batch
    assert cost.l3_link_figures(p, unbatched, state)["l3_link_write_seconds"] == mech.l3_seconds(p, "write", 300,
                                                                                                8 * gb, 0)
    assert cost.l3_link_figures(p, {**fig, "l3": None}, state) == {}  # no L3: nothing to price


def test_the_fit_is_taken_in_double_precision_whatever_the_inputs_type():
    xs = np.linspace(512, 32768, 40, dtype=np.float32)
    ys = (SEED_A + SEED_B * xs).astype(np.float32)
    assert cost.fit_line(xs, ys) == cost.fit_line(xs.astype(np.float64), ys.astype(np.float64))
    assert cost.fit_line([1, 2, 3], [3, 5, 8]) == cost.fit_line([1.0, 2.0, 3.0], [3.0, 5.0, 8.0])


@pytest.mark.parametrize("key", ["compute.prefill_fixed_s", "compute.l2_path_fixed_s"])
def test_an_all_hit_request_without_a_compute_part_is_unpriced_naming_the_key(key):
    p = with_values(load_profile("p800"), **{key: None})
    with pytest.raises(mech.Unpriced) as e:
        cost.allhit_seconds(p, 4096, LAYERS, TOKEN_BYTES)
    assert str(e.value) == f"profile p800 has no {key}"


def test_the_all_hit_fit_is_taken_at_the_prompt_lengths_asked():
    p = load_profile("p800")
    fit = cost.allhit_fit(p, LAYERS, TOKEN_BYTES, tokens=(1000, 3000, 5000))
    assert fit.xs == (1000.0, 3000.0, 5000.0)
    assert fit.ys == tuple(cost.allhit_seconds(p, n, LAYERS, TOKEN_BYTES) for n in (1000, 3000, 5000))
    assert cost.allhit_fit(p, LAYERS, TOKEN_BYTES).xs == tuple(float(n) for n in cost.ALLHIT_TOKENS)


def test_break_even_between_the_first_and_the_second_token_is_not_zero():
    p = with_values(load_profile("p800"), **{"compute.prefill_per_token_pair_s": 0.0})
    one, two = (cost.allhit_seconds(p, n, LAYERS, TOKEN_BYTES) for n in (1, 2))
    per_token = two - one  # the all-hit time is linear in the prompt
    extra = one - per_token - p.compute.prefill_fixed_s  # what loading costs over prefill's fixed part
    p = with_values(p, **{"compute.prefill_per_token_s": per_token + extra / 1.5})  # even at 1.5 tokens
    assert one > p.compute.prefill_seconds(1) and two < p.compute.prefill_seconds(2)
    assert 1 < cost.break_even_tokens(p, LAYERS, TOKEN_BYTES) <= 2  # a one-token prompt still recomputes


def test_without_a_compute_model_prefill_and_break_even_are_unpriced_naming_the_profile():
    emu = load_profile("emu")
    for price in (lambda: cost.prefill_seconds(emu, {}), lambda: cost.break_even_tokens(emu, LAYERS, TOKEN_BYTES)):
        with pytest.raises(mech.Unpriced) as e:
            price()
        assert str(e.value) == ("profile emu has no compute model (compute.prefill_*): no served model to count its "
                                "FLOPs (compute.prefill_model); measure it: hicache calibrate --prefill TTFT.jsonl "
                                "--profile emu --out emu-measured.yaml")


def test_a_curve_profile_reads_each_prefill_from_the_replays_own_tally():
    curve = with_values(load_profile("p800"), **{"compute.prefill_curve": ((0, 0.735), (10_000, 1.035))})
    fig = {"modeled_prefill_compute_seconds": 1.0, "modeled_prefill_l1_only_seconds": 2.0,
           "baseline_prefill_seconds": 3.0}
    assert [cost.prefill_seconds(curve, fig, w) for w in ("compute", "l1_only", "no_cache")] == [1.0, 2.0, 3.0]
    assert cost.prefill_seconds(curve, fig) == 1.0  # as cached, by default


def test_the_replays_net_benefit_reason_and_host_state_say_how_it_was_priced():
    fig = replay(CacheSpec.of(profile="p800", l1_tokens=4096, l2_tokens=16384, write_policy="write_through"),
                 _doc_trace(), None)
    assert fig["net_benefit_reason"] == (
        "busy seconds of HiCache off - this run's (compute saved - L2 path, loads, backup hold and "
        "interference); " + cost.OFF_REASON + "; " + cost.REPLAY_STATE_NOTE)
    assert fig["registered_bytes"] > 0  # the host pool each card registers: its translation entries cost
    assert fig["net_benefit_host_state"] == mech.HostState(registered_bytes=fig["registered_bytes"],
                                                           numa_nodes=load_profile("p800").host.numa_nodes).to_json()
    assert not any(k.startswith("l3_link") for k in fig["net_benefit_assumed_inputs"])  # no L3: no L3 keys
    assert "l3_service_seconds" not in fig and fig["net_benefit_service"]["l3"] == 0.0
    empty = replay(CacheSpec.of(profile="p800"), [], None)
    assert empty["net_benefit_reason"] == "no request replayed: no prefill to save and nothing moved"


def test_an_l3_replay_prices_its_link_and_names_the_l3_keys_it_assumes():
    fig = replay(CacheSpec.of(profile="p800", l1_tokens=4096, l2_tokens=4096, write_policy="write_through",
                              l3="model:", l3_tokens=1 << 20), _doc_trace(), None)
    p = load_profile("p800")
    link = cost.l3_link_figures(p, fig, mech.HostState(registered_bytes=fig["registered_bytes"]))
    assert link and all(fig[k] == v for k, v in link.items())  # the link figures are in the replay's JSON
    assert fig["net_benefit_service"]["l3"] == link["l3_service_seconds"]
    assumed_l3 = sorted(k for k in cost.L3_KEYS if k in p.assumptions())
    assert assumed_l3 and [k for k in fig["net_benefit_assumed_inputs"] if k.startswith("l3_link")] == assumed_l3


def test_l3_reads_and_writes_go_at_their_own_rates_and_the_server_pays_the_l3_service():
    """With read and write rates apart (p800's are one assumed figure), a read is priced at the read
    rate and a write at the write rate; run_service carries the L3's service seconds."""
    p = with_values(load_profile("p800"), **{"l3_link.read_gbps": 40.0, "l3_link.write_gbps": 5.0})
    state = mech.HostState()
    gb = 10**9
    fig = dict(l3="model:", d2h_bytes=10 * gb, l3_bytes_read=8 * gb, l3_bytes_written=8 * gb, l3_pages_read=100,
               l3_pages_written=100, l3_prefetches=4, l3_write_batches=4, l3_modeled_stall_seconds=0.5)
    link = cost.l3_link_figures(p, fig, state)
    assert link["l3_link_write_seconds"] - link["l3_link_read_seconds"] == pytest.approx(8 / 5 - 8 / 40)
    # the same replay's figures with and without its L3: the server's busy time differs by the L3 service
    rep = replay(CacheSpec.of(profile="p800", l1_tokens=4096, l2_tokens=4096, write_policy="write_through",
                              l3="model:", l3_tokens=1 << 20), _doc_trace(), None)
    rep = dict(rep, l3_modeled_stall_seconds=0.5)  # a prefetch waited past its slack
    st = mech.HostState(registered_bytes=rep["registered_bytes"])
    served = cost.run_service(p, rep, st)
    want = cost.l3_link_figures(p, rep, st)["l3_service_seconds"]
    assert want > 0 and served.l3 == want
    assert cost.run_service(p, dict(rep, l3=None), st).l3 == 0.0


def test_an_unknown_l3_write_rate_is_named_as_such():
    p = with_values(load_profile("p800"), **{"l3_link.write_gbps": None})
    fig = dict(l3="model:", d2h_bytes=0, l3_bytes_read=0, l3_bytes_written=10**9, l3_pages_read=0,
               l3_pages_written=10, l3_prefetches=0, l3_write_batches=1, l3_modeled_stall_seconds=0.0)
    with pytest.raises(mech.Unpriced, match=r"l3_link\.write_gbps"):
        cost.l3_link_figures(p, fig, mech.HostState())
