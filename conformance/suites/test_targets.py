"""Seed-config transfer plans meet the hardware profile's segment-count targets (what `hicache plan` checks);
every target of the profile gets a verdict; every reading of its readings file is a modeled target."""

from __future__ import annotations

import pytest

from conformance.targets.judgment import RESULTS_ENV
from hal.transfer.seed import SEED_GEOMETRY, SEED_TOKENS, seed_plan

# The P800 seed transfer (hal.transfer.seed). Its segment counts come from the seed
# work and hold on any device: page_first_direct makes one descriptor per (page, layer) =
# 512 * 78, layer_first one per layer.
SEED_SEGMENTS = {"layer_first": 78, "page_first_direct": 39_936}
METRIC_OF_LAYOUT = {"layer_first": "plan_segments_layer_first_seed",
                    "page_first_direct": "plan_segments_page_first_direct_seed"}


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("layout", list(SEED_SEGMENTS))
def test_seed_plan_segments_meet_targets(profile, layout, direction):
    plan = seed_plan(layout, direction)
    assert plan.nbytes == SEED_TOKENS * SEED_GEOMETRY.layout_dim == 32768 * 78 * 576 * 2  # every byte, once
    targets = [t for t in (profile.targets if profile is not None else ()) if t.metric == METRIC_OF_LAYOUT[layout]]
    if not targets:  # no profile, or one without this target: the seed work's own number
        assert plan.num_segments == SEED_SEGMENTS[layout]
    for t in targets:
        assert t.check(plan.num_segments), (
            f"{t.name}: {plan.num_segments} segments, target {t.describe()} (source: {t.source})")


# -- every target of the profile: a verdict (pass | fail | not_measured) on a basis (measured | modeled) --


def _profile(config):
    from conformance.plugin import default_profile_name
    from hardware_profiles import load_profile

    name = config.getoption("profile") or default_profile_name(config.getoption("backend"))
    if name is None:
        return None
    try:
        return load_profile(name)
    except (ValueError, OSError):  # the plugin reports a bad --profile as a usage error
        return None


def _profile_targets(config) -> list[str]:
    profile = _profile(config)
    return [] if profile is None else [t.name for t in profile.targets]


def _profile_readings(config) -> list[str | None]:
    """The profile's reading names; [None] when its readings file cannot be read (the test then
    raises the file's error)."""
    from conformance.targets.reading_rows import reading_names

    try:
        return reading_names(_profile(config))
    except (ValueError, OSError):
        return [None]


def pytest_generate_tests(metafunc):
    if "target_name" in metafunc.fixturenames:
        names = _profile_targets(metafunc.config)
        metafunc.parametrize("target_name", names or [None], ids=names or ["no_targets"])
    if "reading_name" in metafunc.fixturenames:
        names = _profile_readings(metafunc.config)
        ids = ["readings_unreadable"] if names == [None] else names or ["no_readings"]
        metafunc.parametrize("reading_name", names or [""], ids=ids)


@pytest.fixture(scope="session")
def target_context(request, profile, backend_name):
    from conformance.targets.evaluate import TargetContext

    engine = request.config.getoption("engine")  # what replays the readings' seed scenario
    try:
        backend = request.getfixturevalue("backend")
    except pytest.skip.Exception as e:  # modeled targets are still evaluated; measured ones say why not
        return TargetContext(None, profile, str(e.msg) if hasattr(e, "msg") else str(e), engine)
    return TargetContext(backend, profile, engine=engine)


def _keep(row: dict, prefix: str = "") -> None:
    import json
    import os
    from pathlib import Path

    folder = os.environ.get(RESULTS_ENV)
    if not folder:
        return
    path = Path(folder) / f"{prefix}{row['name']}.json"
    from conformance.common.safe_write import write_text

    write_text(path, json.dumps(row, indent=1, default=str))


def test_target(target_name, profile, target_context):
    """Each target gets its verdict; not_measured skips with the reason (never a pass)."""
    from conformance.targets.evaluate import evaluate
    from conformance.targets.judgment import describe

    if profile is None or target_name is None:
        pytest.skip("no profile targets: pass --profile" if profile is None else f"profile {profile.name} has no targets")
    row = evaluate(profile.target(target_name), target_context)
    _keep(row)
    if row["verdict"] == "not_measured":
        pytest.skip(f"not measured: {target_name}: {row['reason']}")
    assert row["verdict"] == "pass", f"{describe(row)} (source: {row['source']})"


# -- every reading of the profile's readings file: a modeled target, the model's value vs the seed's --


def test_reading(reading_name, profile, target_context):
    """Each reading is within its tolerance on the profile's model (the seed scenario), or fails
    with the model's value, the seed's and how the reading is read; not_measured skips with why."""
    from conformance.targets.judgment import describe
    from conformance.targets.reading_rows import FILE_PREFIX, reading_rows
    from hardware_profiles.measured_readings import load_readings

    if profile is None:
        pytest.skip("no profile readings: pass --profile")
    if reading_name is None:
        load_readings(profile)  # raises the readings file's error
    if not reading_name:
        pytest.skip(f"profile {profile.name} has no readings")
    row = reading_rows(target_context)[reading_name]
    _keep(row, FILE_PREFIX)
    if row["verdict"] == "not_measured":
        pytest.skip(f"not measured: reading {reading_name}: {row['reason']}")
    assert row["verdict"] == "pass", f"reading {describe(row)} (source: {row['source']})"
