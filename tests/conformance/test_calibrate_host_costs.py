"""`hicache calibrate`'s host costs: the translation fit on made-up points (a clear slope is found
within its standard error, a flat line is accepted as ~0, a noisy or falling one is refused with
the reason), translation entries of real buffers, and NUMA left unmeasured on one node, saying so."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.calibrate.slowdown_fit import RESOLUTION, line_with_errors, slowdown_fit

SIZES_M = (0.016, 0.065, 0.262)  # 4 KB entries of 64 MiB, 256 MiB, 1 GiB regions (millions)
THP_M = tuple(e / 512 for e in SIZES_M)


def _points(rho: float, noise: float, rounds: int, seed: int, a: float = 3e-10, drift: float = 0.0):
    """Two timings per round and size (4 KB, THP) of seconds per byte a_g * (1 + rho E), with
    relative noise; `drift` moves each round's a_g (load that changes between rounds)."""
    rng = np.random.default_rng(seed)
    xs, ys, groups = [], [], []
    for s, (e4k, ethp) in enumerate(zip(SIZES_M, THP_M, strict=True)):
        for r in range(rounds):
            ag = a * (1 + drift * rng.uniform(-1, 1))
            for e in (e4k, ethp):
                xs.append(e)
                ys.append(ag * (1 + rho * e) * (1 + noise * rng.standard_normal()))
                groups.append(f"{s}:{r}")
    return xs, ys, groups


def test_a_clear_slope_is_found_within_its_standard_error():
    hits, fits = 0, []
    for seed in range(200):
        f = slowdown_fit(*_points(rho=0.8, noise=0.01, rounds=15, seed=seed, drift=0.3))
        fits.append(f)
        hits += abs(f["rho"] - 0.8) <= f["se"]
    # the standard error is an honest one: about 68% of fits lie within one of the truth
    assert 0.55 <= hits / 200 <= 0.80, hits
    f = fits[0]
    assert f["accepted"] and f["value"] == f["rho"] and abs(f["rho"] - 0.8) <= 2 * f["se"] < 0.8
    assert f["fit"]["groups"] == 45 and f["fit"]["dof"] == 90 - 46


def test_a_flat_well_measured_line_is_accepted_as_about_zero():
    f = slowdown_fit(*_points(rho=0.0, noise=0.005, rounds=15, seed=1, drift=0.3))
    assert f["accepted"] and f["why"] == ""
    assert abs(f["rho"]) <= 2 * f["se"] and f["se"] < f["resolution"]
    assert 0.0 <= f["value"] < f["resolution"]
    assert f["resolution"] == pytest.approx(RESOLUTION / SIZES_M[-1])


def test_round_to_round_drift_does_not_bias_the_grouped_slope():
    xs, ys, groups = _points(rho=0.5, noise=0.0, rounds=5, seed=2, drift=0.5)
    grouped = slowdown_fit(xs, ys, groups)
    assert abs(grouped["rho"] - 0.5) <= 2 * grouped["se"] < 0.1 and grouped["accepted"]
    pooled = slowdown_fit(xs, ys)  # one intercept: the drift between rounds lands in the slope
    assert pooled["se"] > 10 * grouped["se"]


def test_a_noisy_line_is_refused_with_the_reason():
    for seed in range(5):  # whatever the estimate's sign: a negative one resolves no slowdown either
        f = slowdown_fit(*_points(rho=0.0, noise=0.2, rounds=5, seed=seed))
        assert not f["accepted"] and f["value"] is None
        assert f["se"] > max(f["rho"], f["resolution"])
    assert "standard error exceeds the estimate and the resolution" in f["why"]


def test_a_line_falling_beyond_its_error_is_refused_not_written_zero():
    f = slowdown_fit(*_points(rho=-2.0, noise=0.002, rounds=9, seed=4))
    assert not f["accepted"] and f["value"] is None and "negative beyond twice" in f["why"]


def test_line_errors_match_the_textbook_formulas():
    x = [0.0, 1.0, 2.0, 3.0, 4.0]
    y = [1.0, 3.1, 4.9, 7.2, 8.8]
    line = line_with_errors(x, y)
    b, a = np.polyfit(x, y, 1)
    res = np.array(y) - (a + b * np.array(x))
    s2 = float(res @ res) / 3
    sxx = 10.0
    assert line["b"] == pytest.approx(b) and line["a"] == pytest.approx(a)
    assert line["se_b"] == pytest.approx(math.sqrt(s2 / sxx))
    assert line["se_a"] == pytest.approx(math.sqrt(s2 * (1 / 5 + 4 / sxx)))
    assert line["cov_ab"] == pytest.approx(-2 * s2 / sxx)


@pytest.mark.parametrize("xs, ys, groups, arg", [
    ([0.1, 0.2], [1.0, 2.0], None, "xs"),  # no degree of freedom
    ([0.1, 0.2, 0.3], [1.0, 2.0], None, "ys"),
    ([0.1, 0.1, 0.1, 0.1], [1.0, 2.0, 3.0, 4.0], [0, 0, 1, 1], "xs"),  # entries never vary in a group
    ([0.1, 0.2, float("nan")], [1.0, 2.0, 3.0], None, "xs"),
])
def test_bad_fit_input_names_the_argument(xs, ys, groups, arg):
    with pytest.raises(ValueError, match=rf"^{arg}"):
        slowdown_fit(xs, ys, groups)


@pytest.fixture(scope="module")
def emu():
    from hal.backend import get_backend
    from hardware_profiles import load_profile

    with get_backend("emu", load_profile("emu")) as backend:
        yield backend


def test_entries_count_the_pages_the_buffer_is_on(emu):
    from conformance.calibrate.host_costs import entries
    from hal.memory.host import allocate_host

    size = 32 << 20
    with allocate_host(size, huge_pages=False, backend=emu) as small:
        rep = small.report()
        assert rep["huge_page_coverage"] == 0.0 and entries(rep) == size // 4096
    with allocate_host(size, huge_pages=True, backend=emu) as huge:
        rep = huge.report()
        e = entries(rep)
        assert e == rep["huge_page_bytes"] // (2 << 20) + (size - rep["huge_page_bytes"]) // 4096
        if rep["huge_page_coverage"] > 0.99:  # THP available here: 512x fewer entries
            assert e == size // (2 << 20)


@pytest.mark.slow
def test_translation_measures_both_page_kinds_on_real_buffers(emu):
    from conformance.calibrate.host_costs import translation

    t = translation(emu, sizes=(4 << 20, 16 << 20), rounds=5)
    assert [(p["bytes"] >> 20, p["pages"]) for p in t["points"]] == [(4, "4k"), (4, "thp"), (16, "4k"), (16, "thp")]
    assert t["points"][0]["entries"] == 1024 and t["points"][2]["entries"] == 4096
    assert t["fit"]["points"] == 2 * (10 - t["dropped_rounds"])
    assert t["accepted"] == (t["value"] is not None) and (t["accepted"] or t["why"])
    if t["accepted"]:
        assert math.isfinite(t["value"]) and t["value"] >= 0


def test_translation_refuses_regions_this_machine_cannot_hold(emu):
    from conformance.calibrate.host_costs import translation

    with pytest.raises(ValueError, match=r"^translation_sizes: needs ~"):
        translation(emu, sizes=(64 << 40,))


def test_numa_on_one_node_is_not_measured_and_says_why(emu):
    from conformance.calibrate.host_costs import numa
    from hal.topology import sysfs_numa_nodes

    if len(sysfs_numa_nodes()) > 1:
        pytest.skip("this machine has several NUMA nodes")
    assert numa(emu) == {"measured": False, "nodes": [sysfs_numa_nodes()[0].id], "why": "one NUMA node"}


@pytest.mark.slow
def test_the_node_comparison_runs_on_real_bound_memory_and_writes_a_loadable_factor(emu, tmp_path):
    """The measurement a several-node host runs, here between node 0 and itself (this machine may
    have one node): memory really bound by mbind, the factor ~1, its source written and loaded."""
    import yaml

    from conformance.calibrate.host_costs import compare_nodes
    from conformance.calibrate.write import host_costs_section
    from hal.topology import sysfs_numa_nodes
    from hardware_profiles import load_profile

    node = sysfs_numa_nodes()[0].id
    n = compare_nodes(emu, node, [node], rounds=5, nbytes=16 << 20)
    assert n["measured"] and set(n["remote"]) == {str(node)} and n["local_gbps"] > 0
    assert 0.5 < n["factor"] <= 1.0  # the same node: only noise parts the two
    n.update(nodes=[node, node], local_how="node 0 against itself, for this test")
    translation = {"error": "not measured in this test"}
    cal = {"translation": translation, "numa": n,
           "host_costs": {"translation_slowdown_per_mentry": {"value": None}, "numa_remote_bw_factor": {}}}
    section = host_costs_section({"submit_contention": {"value": 0.3, "source": "assumed: a test"}}, cal,
                                 "measured: a test")
    assert list(section) == ["submit_contention", "translation_slowdown_per_mentry", "registered_slowdown_per_gb",
                             "numa_remote_bw_factor"]
    assert section["translation_slowdown_per_mentry"] == {"value": "unknown",
                                                          "source": "measured: a test: not measured: not measured "
                                                                    "in this test"}
    data = yaml.safe_load(load_profile("emu").path.read_text())
    data["host_costs"] = section
    path = tmp_path / "numa.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    profile = load_profile(path)
    assert profile.host_costs.numa_remote_bw_factor == round(n["factor"], 6)
    assert profile.sources["host_costs.numa_remote_bw_factor"].startswith("measured: a test: remote / local bandwidth")
    assert profile.host_costs.submit_contention == 0.3
