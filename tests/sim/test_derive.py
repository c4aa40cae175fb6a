"""The P800 profile's derived parameters are what hicache_ref.sim.derive computes from the seed's
readings (hardware_profiles/readings/p800.yaml) on the seed scenario, and the readings file is
schema-checked like a profile."""

from __future__ import annotations

import dataclasses

import pytest

from hardware_profiles import ProfileError, load_profile
from hardware_profiles.readings import build_readings, load_readings
from hicache_ref.sim import derive as d
from hicache_ref.sim.readings import evaluate, replay_pairs
from hicache_ref.sim.seed_scenario import seed_requests, seed_runs


@pytest.fixture(scope="module")
def seed():
    profile = load_profile("p800")
    readings = load_readings(profile)
    runs = seed_runs(readings, seed_requests(), profile)
    derived, notes = d.derive(profile, readings, runs)
    return profile, readings, runs, derived, notes


@pytest.mark.slow
def test_every_derived_value_in_p800_is_the_derivation(seed):
    profile, _, _, derived, notes = seed
    entries = d.profile_entries(derived, notes)
    for key, (value, _) in entries.items():
        assert d.value(profile, key) == pytest.approx(value, rel=1e-4), key
        assert profile.sources[key].startswith("derived:"), key


@pytest.mark.slow
def test_a_changed_reading_moves_the_parameters_it_derives(seed):
    profile, readings, runs, derived, _ = seed
    # one chunk's inline submission took 2.6 s instead of 1.3: the fitted per-segment cost rises
    changed = tuple(dataclasses.replace(r, value=2.6) if r.name == "d2h_submission_inline" else r
                    for r in readings.readings)
    again, _ = d.derive(profile, dataclasses.replace(readings, readings=changed), runs)
    assert again.link.per_segment_us > derived.link.per_segment_us * 1.1
    # the exact ones do not depend on it
    assert again.link.kernel_per_item_us == pytest.approx(derived.link.kernel_per_item_us, rel=1e-3)


@pytest.mark.slow
def test_derives_lists_the_parameters_the_derivation_takes_from_each_reading(seed):
    _, readings, *_ = seed
    joint = {k for k, *_ in d.JOINT}
    for r in readings.readings:
        if r.name in d.JOINT_READINGS:
            assert set(r.derives) == joint, r.name
        else:
            assert not set(r.derives) & joint, r.name
    named = {k for r in readings.readings for k in r.derives}
    assert named == set(d.DERIVED_KEYS)


@pytest.mark.slow
def test_the_profile_as_derived_meets_the_readings_it_was_derived_from(seed):
    profile, readings, runs, *_ = seed
    rows = {r["reading"]: r for r in evaluate(profile, readings, runs)}
    for name in ("d2h_submission_inline", "first_request_daemon", "allhit_intercept", "allhit_slope", "break_even",
                 "h2d_bandwidth", "hit_rate_l1_only", "hit_rate_hicache"):
        assert rows[name]["within"], rows[name]["detail"]
    # the story: a loss as first built, a gain with every fix
    assert rows["first_request_first_build"]["model"] > rows["first_request_off"]["model"] * 1.5
    assert rows["ttft_all_fixes"]["model"] < -20


@pytest.mark.slow
def test_a_wrong_parameter_fails_the_readings_it_governs(seed):
    profile, readings, runs, *_ = seed
    wrong = d.with_values(profile, **{"link.per_segment_us": 1.0})
    rows = {r["reading"]: r for r in evaluate(wrong, readings, runs)}
    assert not rows["d2h_submission_inline"]["within"]
    assert not rows["first_request_first_build"]["within"]
    assert rows["allhit_slope"]["within"]  # a parameter it does not read


def _readings_text(**patch) -> str:
    base = (load_readings(load_profile("p800")).path).read_text(encoding="utf-8")
    for old, new in patch.items():
        assert old in base
        base = base.replace(old, new, 1)
    return base


@pytest.mark.parametrize(("old", "new", "key"), [
    ("    unit: s\n", "    unit: ms\n", "readings.first_request_off.unit"),
    ("    quantity: first_request_ttft\n", "    quantity: first_token\n", "readings.first_request_off.quantity"),
    ("    state: hicache_off\n", "    state: nowhere\n", "readings.first_request_off.state"),
    ("  hicache_off: {hicache: false}", "  hicache_off: {hicache: false, numa: far}", "states.hicache_off.numa"),
    ("  tp: 8\n", "  tp: eight\n", "scenario.tp"),
    ("  hicache_off: {hicache: false}", "  hicache_off:", "states.hicache_off"),  # null is not the first build
    ("      - link.per_segment_us\n", "      - link.per_segment_usec\n", "readings.first_request_off.derives"),
    ("    value: -1\n", "    value: 0.5\n", "readings.plateau_smaller_l2_faster.value"),
    ("  first_request_off:\n", "  First-Request:\n", "readings.First-Request"),
])
def test_a_bad_readings_file_names_the_key(tmp_path, old, new, key):
    path = tmp_path / "r.yaml"
    path.write_text(_readings_text(**{old: new}), encoding="utf-8")
    with pytest.raises(ProfileError) as e:
        build_readings(path.read_text(encoding="utf-8"), path)
    assert e.value.key_path == key
    assert str(path) in str(e.value)


def _reading(unit, value, quantity="workload_ttft_change"):
    from hardware_profiles.readings import Reading

    return Reading("r", "m", quantity, value, unit, "i")


@pytest.mark.parametrize(("unit", "seed", "model", "ok"), [
    ("s", 10.0, 11.4, True), ("s", 10.0, 11.6, False), ("s", 10.0, 8.6, True), ("s", 10.0, 8.4, False),
    ("%", 20.6, 23.5, True), ("%", 20.6, 23.7, False), ("%", -2.1, 0.8, False),  # within 3 points, wrong sign
    ("%", -2.1, -5.0, True), ("%", -36.0, -33.1, True), ("%", -36.0, -32.9, False),
    ("segments", 78.0, 78.0, True), ("segments", 78.0, 79.0, False),
    ("sign", -1.0, -1.0, True), ("sign", -1.0, 1.0, False), ("sign", -1.0, 0.0, False),
    ("s", 10.0, float("nan"), False),
])
@pytest.mark.slow
def test_within_the_tolerance_and_the_sign(unit, seed, model, ok):
    from hicache_ref.sim.readings import within

    assert bool(within(_reading(unit, seed), model)) is ok


def test_a_readings_file_for_another_profile_is_refused(tmp_path):
    profile = load_profile("p800")
    folder = tmp_path / "readings"
    folder.mkdir()
    (folder / "p800.yaml").write_text(_readings_text(**{"profile: p800\n": "profile: p900\n"}), encoding="utf-8")
    copy = tmp_path / "mine.yaml"
    copy.write_text(profile.path.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ProfileError) as e:
        load_readings(load_profile(str(copy)))
    assert e.value.key_path == "profile"


@pytest.mark.slow
def test_the_replays_made_ahead_are_every_one_the_readings_price(seed, monkeypatch):
    """Runs.prefetch(replay_pairs(...)) makes each replay the readings ask for, in worker processes
    where there are cores, so pricing them replays nothing more, and makes none they do not ask for."""
    from hicache_ref.sim.scenario import cache_key

    profile, readings, _, _, _ = seed
    runs = seed_runs(readings, seed_requests(), profile)
    runs.prefetch(replay_pairs(readings), workers=1)
    made, asked, figures = dict(runs._figs), set(), runs.figures
    monkeypatch.setattr(runs, "figures", lambda st, l2: asked.add(cache_key(st, l2)) or figures(st, l2))
    evaluate(profile, readings, runs, ensemble=(profile,))
    assert runs._figs == made and asked == set(made)
