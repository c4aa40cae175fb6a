"""calibrate's cost per registered GB: recovered from THP timings with its error, refused with why."""

import numpy as np
import pytest

from conformance.calibrate.registered_fit import registered_fit
from conformance.calibrate.write import host_costs_section


def _points(sigma: float, rho: float, noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    gb = np.repeat([0.064, 0.256, 1.0, 4.0], 9)
    entries = np.ceil(gb * 1e9 / (2 << 20))
    a = 1 / 8e9  # seconds per byte at 8 GB/s
    y = a * (1 + rho * entries / 1e6 + sigma * gb) * (1 + noise * rng.standard_normal(gb.size))
    return gb.tolist(), entries.tolist(), y.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_known_cost_per_gb_is_recovered_within_its_error(seed):
    r = registered_fit(*_points(sigma=0.03, rho=0.5, noise=0.002, seed=seed), rho=0.5)
    assert r["accepted"] and abs(r["sigma"] - 0.03) < 3 * r["se"] and r["value"] == r["sigma"]


def test_timings_too_noisy_to_resolve_a_cost_per_gb_are_refused_saying_why():
    r = registered_fit(*_points(sigma=0.0, rho=0.0, noise=0.2), rho=0.0)
    assert not r["accepted"] and r["value"] is None and "standard error exceeds" in r["why"]


def test_no_cost_per_gb_resolved_within_the_resolution_is_written():
    r = registered_fit(*_points(sigma=0.0, rho=0.0, noise=0.05), rho=0.0)
    assert r["accepted"] and r["se"] < r["resolution"] and r["value"] < r["resolution"]


def test_the_translation_term_is_divided_out_first():
    gb, e, y = _points(sigma=0.0, rho=20.0, noise=0.0)
    assert registered_fit(gb, e, y, rho=20.0)["sigma"] == pytest.approx(0.0, abs=1e-9)
    assert registered_fit(gb, e, y, rho=0.0)["sigma"] > 0.001  # entries left in would read as a cost per GB


def test_a_refused_fit_keeps_the_profiles_value_and_says_why():
    cal = {"translation": {"sizes": [64 << 20], "registered": {"accepted": False, "why": "too noisy"}},
           "numa": {"measured": False},
           "host_costs": {"translation_slowdown_per_mentry": {"value": None}}}
    base = {"registered_slowdown_per_gb": {"value": 0.01, "source": "derived: a test"}}
    cal["translation"]["error"] = "skip"
    section = host_costs_section(base, cal, "measured: a test")
    held = section["registered_slowdown_per_gb"]
    assert held["value"] == 0.01 and held["source"].startswith("derived: a test; kept: measured: a test: not measured")
