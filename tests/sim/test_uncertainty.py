"""How sure the model is: the fit's standard errors and intervals cover the truth, leave-one-out
scores prediction (a corrupted reading, a mechanism the seed contradicts), the ensemble is
deterministic, and a profile's stated ranges are checked."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from hardware_profiles import ProfileError, load_profile
from hardware_profiles.readings import load_readings
from hardware_profiles.schema import build
from hicache_ref.sim import derive as d
from hicache_ref.sim import fit_stats, loo
from hicache_ref.sim import mechanisms as mech
from hicache_ref.sim import uncertainty as u
from hicache_ref.sim.readings import model_value
from hicache_ref.sim.seed_scenario import seed_requests, seed_runs

# -- the covariance, on an analytic stand-in: y = a exp(-b t) + c, errors of known size -----------

T = np.linspace(0.0, 4.0, 12)
TRUE = np.array([2.0, 0.7, 0.5])
SIGMA = 0.05


def _fit(y):
    from scipy.optimize import least_squares

    lo, hi, scale = np.array([0.0, 0.0, -5.0]), np.array([10.0, 5.0, 5.0]), np.array([1.0, 1.0, 1.0])

    def res(x):
        return (x[0] * np.exp(-x[1] * T) + x[2] - y) / SIGMA

    x = least_squares(res, np.array([1.0, 1.0, 0.0]), bounds=(lo, hi), xtol=1e-12, ftol=1e-12).x
    cov, _ = fit_stats.covariance(fit_stats.jacobian(res, x, lo, hi, scale), res(x))
    return x, np.sqrt(np.diag(cov))


@pytest.mark.slow
def test_the_fits_90pct_interval_covers_the_truth_in_about_90pct_of_seeded_trials():
    rng = np.random.default_rng(7)
    clean = TRUE[0] * np.exp(-TRUE[1] * T) + TRUE[2]
    hits, z = [], []
    for _ in range(200):
        x, se = _fit(clean + rng.normal(0.0, SIGMA, T.size))
        hits.append(np.abs(x - TRUE) <= 1.645 * se)
        z.append(np.abs(x - TRUE) / se)
    coverage = np.mean(hits, axis=0)
    # the chi-square floor of 1 makes the interval a little wide, never narrow
    assert np.all((coverage >= 0.84) & (coverage <= 0.99)), coverage
    assert np.all(np.median(z, axis=0) < 1.0)  # recovered within a standard error, typically


def test_a_parameter_one_observation_carries_is_flagged():
    jac = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 3.0], [1.0, 0.0]])
    carried = fit_stats.determining(jac, ["a", "b", "c", "d"])
    assert carried[0] == ["a", "b", "c", "d"] and carried[1] == ["c"]
    est = fit_stats.Estimate("k", 1.0, 0.1, tuple(carried[1]), False)
    assert est.weakly_determined


# -- the real derivation, on readings generated from known parameters --------------------------

@pytest.fixture(scope="module")
def seed():
    profile = load_profile("p800")
    readings = load_readings(profile)
    return profile, readings, seed_runs(readings, seed_requests(), profile)


def _readings_from(profile, readings, runs, noise: float, seed: int):
    """`readings` with each jointly fitted value replaced by `profile`'s model value plus noise of
    `noise` tolerances (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in readings.readings:
        if r.name in d.JOINT_READINGS:
            m = model_value(profile, r, readings, runs)
            r = dataclasses.replace(r, value=float(m + rng.normal(0.0, noise) * d.reading_scale(r)))
        out.append(r)
    return dataclasses.replace(readings, readings=tuple(out))


@pytest.mark.slow
def test_the_derivation_recovers_known_parameters_within_their_standard_errors(seed):
    profile, readings, runs = seed
    truth = d.with_values(profile, **{"host_costs.numa_remote_bw_factor": 0.3})  # off its bound
    truth = d.exact(truth, readings, {})
    fit = d.derive_fit(profile, _readings_from(truth, readings, runs, 0.3, 3), runs)
    for e in fit.estimates():
        assert abs(e.value - d.value(truth, e.key)) <= 3 * e.stderr + 1e-12, e


# -- leave-one-out --------------------------------------------------------------------------------

@pytest.mark.slow
def test_leave_one_out_flags_a_corrupted_reading(seed):
    profile, readings, runs = seed
    clean = loo.leave_one_out(profile, readings, runs, names=("ttft_all_fixes",))
    assert clean["predictions"][0]["within"] and clean["readings_loo_within"] == 1
    bad = tuple(dataclasses.replace(r, value=-10.0) if r.name == "ttft_all_fixes" else r for r in readings.readings)
    out = loo.leave_one_out(profile, dataclasses.replace(readings, readings=bad), runs, names=("ttft_all_fixes",))
    assert out["readings_loo_within"] == 0 and out["readings_loo_total"] == 1
    assert out["worst"][0]["reading"] == "ttft_all_fixes" and out["worst"][0]["miss_tolerances"] > 5


@pytest.mark.slow
def test_interleave_priced_as_the_harmonic_mix_lowers_the_leave_one_out_count(seed, monkeypatch):
    profile, readings, runs = seed
    names = ("ttft_before_transfer_fixes", "ttft_all_fixes", "numa_local")
    kept = loo.leave_one_out(profile, readings, runs, names=names)["readings_loo_within"]
    local = mech.numa_factor

    def harmonic(p, state):  # the mechanism the seed contradicts: interleaved = 1/N local, the rest remote
        if state.numa != "interleave" or state.numa_nodes == 1:
            return local(p, state)
        nu, n = p.host_costs.numa_remote_bw_factor, state.numa_nodes
        return 1.0 / (1.0 / n + (n - 1) / n / nu)

    monkeypatch.setattr(mech, "numa_factor", harmonic)
    assert loo.leave_one_out(profile, readings, runs, names=names)["readings_loo_within"] < kept


def test_the_score_counts_what_the_predictions_say():
    preds = [{"reading": n, "within": w, "left_out": v, "seed": 1.0, "unit": "s", "in_sample": 1.0,
              "miss_tolerances": m} for n, w, v, m in (("a", True, 1.0, 0.0), ("b", False, 3.0, 2.0))]
    from conformance.report.answer import left_out

    rows = [{"name": p["reading"], "target": 1.0, "unit": "s", "reading": {"model": 1.0, "loo_model": p["left_out"],
                                                                             "loo_within": p["within"]}}
            for p in preds] + [{"name": "c", "target": 1.0, "unit": "s", "reading": {"loo_within": None}}]
    out = left_out(rows)
    assert (out["readings_loo_within"], out["readings_loo_total"]) == (1, 2)
    assert [w["reading"] for w in out["loo_worst"]] == ["b"]


# -- the ensemble ---------------------------------------------------------------------------------

def _members_json(profile) -> str:
    keys = (*d.DERIVED_KEYS, "link.d2h_gbps", "link.per_launch_us", "host_costs.ido_shared_d2h_factor",
            "l3_link.read_gbps")
    return json.dumps([[d.value(m, k) for k in keys] for m in u.ensemble(profile)])


@pytest.mark.slow
def test_the_ensemble_is_the_profile_then_seeded_draws_the_same_bit_for_bit(seed, monkeypatch):
    from hicache_ref.sim import derivation_cache

    profile, readings, runs = seed
    derivation_cache.remember(profile, runs)
    first = _members_json(profile)
    monkeypatch.setattr(u, "_MEMBERS", {})
    monkeypatch.setattr(derivation_cache, "_STATS", {})
    assert _members_json(profile) == first
    members = u.ensemble(profile)
    assert len(members) == u.ENSEMBLE_SIZE and members[0] is profile
    lo, hi = profile.ranges["link.d2h_gbps"]
    d2h = [m.link.d2h_gbps for m in members[1:]]
    assert all(lo <= v <= hi for v in d2h) and len(set(d2h)) == len(d2h)  # drawn over the stated range
    seg = [m.link.per_segment_us for m in members]
    assert min(seg) < profile.link.per_segment_us < max(seg)  # a derived value spread by its covariance


def test_a_profile_without_readings_or_ranges_has_copies_of_itself_and_unknowns_stay_unknown(tmp_path):
    import re

    text = re.sub(r"\n *range: \[[^\]]*\]", "", load_profile("h200").path.read_text(encoding="utf-8"))
    path = tmp_path / "h200-no-ranges.yaml"
    path.write_text(text, encoding="utf-8")
    p = load_profile(path)
    assert not p.ranges and not p.stderrs and p.link.registration_s_per_gib is None
    members = u.ensemble(p)
    assert len(members) == u.ENSEMBLE_SIZE and all(m == p for m in members)


# -- ranges and stderrs in a profile ---------------------------------------------------------------

def _p800_text(old: str, new: str) -> str:
    text = load_profile("p800").path.read_text(encoding="utf-8")
    assert old in text
    return text.replace(old, new, 1)


D2H_RANGE = "    range: [4.4, 8.4]\n"


@pytest.mark.parametrize(("old", "new", "key"), [
    (D2H_RANGE, "    range: [8.4, 4.4]\n", "link.d2h_gbps.range"),
    (D2H_RANGE, "    range: 5\n", "link.d2h_gbps.range"),
    (D2H_RANGE, "    range: [8.0, 9.0]\n", "link.d2h_gbps.range"),  # does not hold the value 7.40
    (D2H_RANGE, "    range: [-1.0, 9.0]\n", "link.d2h_gbps.range"),  # outside the key's own bound
    (D2H_RANGE, "    stderr: 0.2\n", "link.d2h_gbps.stderr"),  # an assumed value states a range
    ("  per_segment_us:\n    value: ", "  per_segment_us:\n    range: [1.0, 500.0]\n    value: ",
     "link.per_segment_us.range"),  # a derived value's spread is its fit's
    ("  per_segment_us:\n    value: ", "  per_segment_us:\n    stderr: -3.0\n    value: ",
     "link.per_segment_us.stderr"),
])
def test_a_bad_range_or_stderr_names_the_file_and_key(tmp_path, old, new, key):
    path = tmp_path / "bad.yaml"
    path.write_text(_p800_text(old, new), encoding="utf-8")
    with pytest.raises(ProfileError) as e:
        build(path.read_text(encoding="utf-8"), path)
    assert e.value.key_path == key and str(path) in str(e.value)
    assert "\n" not in str(e.value)


def test_a_measured_value_may_state_its_stderr(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(_p800_text("  per_segment_us:\n    value: ", "  per_segment_us:\n    stderr: 18.0\n    value: "),
                    encoding="utf-8")
    assert build(path.read_text(encoding="utf-8"), path).stderrs == {"link.per_segment_us": 18.0}


def test_every_assumed_value_of_the_shipped_profiles_states_its_range():
    from hardware_profiles import list_profiles

    for name in list_profiles():
        p = load_profile(name)
        assert set(p.assumptions()) <= set(p.ranges), name


# -- the interval and the answer word ---------------------------------------------------------------

def test_the_interval_is_the_5th_to_95th_percentile_and_spanning_zero_is_undecided():
    assert u.interval(range(1, 101)) == pytest.approx((5.95, 95.05))
    assert u.interval([3.0]) == (3.0, 3.0)
    assert u.answer((-5.0, -0.1)) == "gain" and u.answer((0.1, 4.0)) == "loss"
    assert u.answer((-2.0, 1.0)) == "undecided" and u.answer((0.0, 0.0)) == "undecided"


# -- held-out workloads ------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_seed_shaped_trace_the_derivation_never_saw_keeps_the_ladders_sign(seed):
    from hicache_ref.sim.held_out import held_out

    profile, readings, _ = seed
    (row,) = held_out(profile, readings, seeds=(3,), pd=(True,), requests=600)
    for end, word in (("first_build", "loss"), ("all_fixes", "gain")):
        lo, hi = row[end]["ttft_change_pct_interval"]
        assert lo <= row[end]["ttft_change_pct"] <= hi and row[end]["answer"] == word, row
    assert row["sign_kept"]


def test_an_ensemble_without_the_derivation_registered_is_refused_not_narrowed():
    """A library caller that never imported the derivation gets an error naming the import, never
    members that leave the derived parameters' spread out (an interval too narrow to trust)."""
    import subprocess
    import sys

    code = ("from hardware_profiles import load_profile\nfrom hicache_ref.sim import uncertainty\n"
            "try:\n    uncertainty.ensemble(load_profile('p800'))\nexcept LookupError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "import hicache_ref.sim.derivation_cache" in out.stdout
