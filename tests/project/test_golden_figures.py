"""Every JSON figure of replay, sweep and ablate on the pinned slices (tests/golden) is unchanged:
a refactor moves code, not results; a change meant to move a figure recaptures and says why."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.golden.capture import conform_targets, run_case
from tests.golden.cases import CASES, VOLATILE

HERE = Path(__file__).resolve().parents[1] / "golden"


pytestmark = pytest.mark.slow  # each case runs hicache in a child process


def _figures(value, path=""):
    """Leaves of a JSON document by path; volatile keys dropped at any depth."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in VOLATILE:
                yield from _figures(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _figures(v, f"{path}[{i}]")
    else:
        yield path, value


@pytest.mark.parametrize("name", sorted(CASES))
def test_pinned_slice_figures_unchanged(name):
    expected = dict(_figures(json.loads((HERE / f"{name}.json").read_text())))
    got = dict(_figures(run_case(name)))
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{name}: figures gone from the JSON: {missing[:10]}"
    changed = [(k, expected[k], got[k]) for k in sorted(expected)
               if not (expected[k] == got[k] or (isinstance(expected[k], float) and isinstance(got[k], float)
                                                 and math.isnan(expected[k]) and math.isnan(got[k])))]
    assert not changed, f"{name}: {len(changed)} figures moved, first {changed[:5]}"


def test_conform_targets_the_model_decides_unchanged():
    expected = json.loads((HERE / "conform_targets.json").read_text())
    assert conform_targets() == expected


def test_the_comparison_sees_a_moved_figure():
    """The comparison itself fails on a one-ulp change deep in a nested figure."""
    doc = json.loads((HERE / "ablate_served_tp.json").read_text())
    before = dict(_figures(doc))
    doc["steps"][1]["hit_rate"] = math.nextafter(doc["steps"][1]["hit_rate"], 1.0)
    after = dict(_figures(doc))
    assert [k for k in before if before[k] != after[k]] == ["steps[1].hit_rate"]
