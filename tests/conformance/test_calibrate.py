"""`hicache calibrate` on emu: writes a profile that loads, with measured sources, and bandwidth beside a
memcpy of the same run; its samples and fits (with residuals) are kept beside it; the host costs
(translation slowdown, NUMA factor) are measured or say why not, the base's others kept."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from conformance.cli.main import main
from hardware_profiles import load_profile


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrate") / "thisbox.yaml"
    # emu's per-segment cost is below what a CPU copy resolves: its fit may be poor, and is accepted here
    rc = main(["calibrate", "--backend", "emu", "--out", str(out), "--sizes", "16MiB,64MiB,256MiB", "--repeat", "9",
               "--quiet", "--accept-poor-fit"])
    return rc, out


@pytest.mark.slow
def test_calibrate_does_only_the_work_asked(calibrated):
    """The run is bounded by its arguments: the sizes and repeats given, no more (its speed is
    BENCHMARKS.md's, not a unit test's)."""
    _, out = calibrated
    cal = json.loads(out.with_name("thisbox.calibration.json").read_text())
    assert cal["repeat"] == 9
    sizes = [16 << 20, 64 << 20, 256 << 20]
    assert {d: [r["bytes"] for r in rows] for d, rows in cal["bandwidth"].items()} == {"h2d": sizes, "d2h": sizes}


@pytest.mark.slow
def test_calibrate_writes_a_loadable_measured_profile(calibrated):
    rc, out = calibrated
    assert rc == 0
    profile = load_profile(out)
    for key in ("h2d_gbps", "d2h_gbps", "per_segment_us", "per_launch_us", "registration_s_per_gib"):
        assert profile.sources[f"link.{key}"].startswith("measured: `hicache calibrate"), key
        assert getattr(profile.link, key) is not None
    assert not any(k.startswith("link.") for k in profile.assumptions())  # the link's assumptions are replaced
    assert profile.targets == load_profile("emu").targets  # everything but the link kept from the base


@pytest.mark.slow
def test_each_measured_link_value_is_written_with_its_standard_error(calibrated):
    """stderr: beside value and source: the median bandwidth's over its repeats, a slope's from its fit."""
    _, out = calibrated
    doc = yaml.safe_load(out.read_text())
    cal = json.loads(out.with_name("thisbox.calibration.json").read_text())
    for key in ("h2d_gbps", "d2h_gbps", "per_segment_us", "per_launch_us", "registration_s_per_gib"):
        leaf = doc["link"][key]
        assert isinstance(leaf["stderr"], float) and leaf["stderr"] >= 0, key
    rows = cal["bandwidth"]["h2d"]
    assert doc["link"]["h2d_gbps"]["stderr"] == float(f"{rows[-1]['gbps_stderr']:.4g}")
    fit = cal["fit_quality"]["fits"]["per_launch_us"]
    assert doc["link"]["per_launch_us"]["stderr"] == float(f"{fit['se_b'] * 1e6:.4g}")


@pytest.mark.slow
def test_calibrated_profile_has_the_measured_translation_slowdown_or_says_why_not(calibrated):
    _, out = calibrated
    profile = load_profile(out)
    cal = json.loads(out.with_name("thisbox.calibration.json").read_text())
    source = profile.sources["host_costs.translation_slowdown_per_mentry"]
    assert source.startswith("measured: `hicache calibrate") and "4 KB pages and on THP" in source
    rho = profile.host_costs.translation_slowdown_per_mentry
    entry = cal["host_costs"]["translation_slowdown_per_mentry"]
    assert entry["measured"] and entry["written"] == (rho is not None)
    if rho is None:  # refused: the profile says unknown, and why
        assert "not written: " in source and entry["why"] in source
    else:
        assert math.isfinite(rho) and rho >= 0 and rho == round(entry["value"], 6)
        assert f"+/- {cal['translation']['se']:.2g}" in source
    t = cal["translation"]
    assert [p["pages"] for p in t["points"]] == ["4k", "thp"] * 3 and t["fit"]["residuals"]
    assert t["sizes"] == [64 << 20, 256 << 20, 1 << 30]  # the defaults: fit a 2-core 24 GiB box
    # the cost per registered GB, measured on THP beside it: written with its error, or why not
    reg, entry = cal["translation"]["registered"], cal["host_costs"]["registered_slowdown_per_gb"]
    source = profile.sources["host_costs.registered_slowdown_per_gb"]
    assert "on the GB registered" in source and entry["written"] == reg["accepted"]
    if reg["accepted"]:
        assert profile.host_costs.registered_slowdown_per_gb == round(reg["value"], 6) and "+/- " in source
    else:
        assert "not written: " in source and reg["why"] in source


@pytest.mark.slow
def test_numa_on_one_node_is_not_invented(calibrated):
    from hal.topology import sysfs_numa_nodes

    if len(sysfs_numa_nodes()) > 1:
        pytest.skip("this machine has several NUMA nodes")
    _, out = calibrated
    cal = json.loads(out.with_name("thisbox.calibration.json").read_text())
    assert cal["host_costs"]["numa_remote_bw_factor"] == {"value": None, "measured": False, "written": False,
                                                          "why": "one NUMA node"}
    profile = load_profile(out)
    assert profile.host_costs.numa_remote_bw_factor is None  # emu's profile has none: none is made up
    assert "host_costs.numa_remote_bw_factor" not in profile.sources


@pytest.mark.slow
def test_a_calibration_on_p800_keeps_its_other_host_costs_with_their_sources(tmp_path, capsys):
    import yaml

    out = tmp_path / "p800here.yaml"
    assert main([*SMALL, "--profile", "p800", "--out", str(out), "--accept-poor-fit", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["host_costs"]) == {"translation_slowdown_per_mentry", "registered_slowdown_per_gb",
                                          "numa_remote_bw_factor"}
    base, mine = load_profile("p800"), load_profile(out)
    written = yaml.safe_load(out.read_text())["host_costs"]
    assert list(written) == list(yaml.safe_load(base.path.read_text())["host_costs"])  # same keys, same order
    for key in ("submit_contention", "d2h_interference", "ido_shared_d2h_factor", "numa_remote_bw_factor"):
        assert getattr(mine.host_costs, key) == getattr(base.host_costs, key)
        assert mine.sources[f"host_costs.{key}"] == base.sources[f"host_costs.{key}"]
    source = mine.sources["host_costs.translation_slowdown_per_mentry"]
    if printed["host_costs"]["translation_slowdown_per_mentry"]["written"]:
        assert source.startswith("measured: ")
    else:  # refused: the derived value stays, and its source says calibrate did not replace it and why
        assert mine.host_costs.translation_slowdown_per_mentry == base.host_costs.translation_slowdown_per_mentry
        assert source.startswith("derived: ") and "; kept: measured: " in source and "not written: " in source


@pytest.mark.slow
def test_calibrated_bandwidth_is_reported_beside_a_memcpy_of_the_same_run(calibrated):
    """Each size's row carries the memcpy measured round by round beside it and their paired ratio;
    the profile's link is the largest size's median. (How near the two are is BENCHMARKS.md's.)"""
    _, out = calibrated
    cal = json.loads(out.with_name("thisbox.calibration.json").read_text())
    for d in ("h2d", "d2h"):
        for row in cal["bandwidth"][d]:
            assert row["gbps"] > 0 and row["memcpy_gbps"] > 0, (d, row)
            assert math.isfinite(row["ratio_vs_memcpy"]) and row["ratio_vs_memcpy"] > 0, (d, row)
        assert cal["link"][f"{d}_gbps"] == cal["bandwidth"][d][-1]["gbps"]


@pytest.mark.slow
def test_calibration_keeps_fits_with_residuals(calibrated):
    _, out = calibrated
    cal = json.loads(out.with_name("thisbox.calibration.json").read_text())
    for block in (cal["segments"], cal["launches"]):
        fit = block["fit"]
        assert len(fit["residuals"]) == len(block["points"]) and "r2" in fit
    assert cal["bandwidth_fits"]["h2d"]["points"] == 3
    assert cal["registration"]["thp"] and cal["registration"]["4k"]
    assert cal["machine"]["host"] and cal["date"] and cal["command"].startswith("hicache calibrate")


@pytest.mark.slow
def test_calibration_records_fit_quality_and_marks_accepted_poor_fits(calibrated):
    _, out = calibrated
    cal = json.loads(out.with_name("thisbox.calibration.json").read_text())
    quality = cal["fit_quality"]
    assert set(quality["fits"]) == {"per_segment_us", "per_launch_us", "registration_s_per_gib"}
    sources = load_profile(out).sources
    for key, _, why in quality["poor"]:
        assert f"poor fit accepted with --accept-poor-fit ({why})" in sources[f"link.{key}"]
    for key, j in quality["fits"].items():
        scale = 1.0 if key.startswith("registration") else 1e6
        # every fitted figure's source carries its slope's standard error
        assert f"+/- {j['se_b'] * scale:.2g}" in sources[f"link.{key}"]


SEGMENTS = np.array([1, 256, 1024, 4096, 16384], dtype=float)


WOBBLE = np.array([1.0, -1.0, -1.0, 1.0, 0.0])  # timing noise of a known size, uncorrelated with the counts


def _timings(intercept, slope, noise):
    return (intercept + slope * SEGMENTS) * (1 + noise * WOBBLE)


def test_a_flat_precisely_measured_slope_is_accepted_though_its_r2_is_near_0():
    from conformance.calibrate.fit_quality import judge
    from hicache_ref.sim.price.cost import fit_line

    # emu's per-segment cost: 12 ms for 16 MiB whatever the segments (the copy engine merges
    # them), 0.001 us each, the timings within 0.3%
    ys = _timings(12e-3, 0.001e-6, 0.003)
    assert fit_line(SEGMENTS, ys).r2 < 0.1  # an R^2 gate refuses this line
    j = judge(SEGMENTS, ys)
    assert j["accepted"] and j["se_b"] < j["resolution"], j


def test_a_noisy_line_is_refused_and_says_why():
    from conformance.calibrate.fit_quality import judge

    j = judge(SEGMENTS, _timings(12e-3, 0.04e-6, 0.05))  # 5% noise: the slope is lost in it
    assert not j["accepted"] and "standard error exceeds" in j["why"], j
    j = judge(SEGMENTS, _timings(12e-3, 0.04e-6, 0.3))  # 30%: the points are not on any line
    assert not j["accepted"] and "rms" in j["why"], j


def test_a_steep_precise_slope_is_accepted_and_a_vague_steep_one_refused():
    from conformance.calibrate.fit_quality import judge

    ys = _timings(1e-3, 1e-6, 0.01)  # 1 us per segment, the timings within 1%
    assert judge(SEGMENTS, ys)["accepted"]
    # 4 points, a slope 0.36 known only to within 0.37: refused
    xs, ys = np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 11.4, 10.2, 11.6])
    j = judge(xs, ys)
    assert not j["accepted"] and j["se_b"] > max(0.25 * j["b"], j["resolution"]), j
    assert judge(xs, [10.0, 10.4, 10.8, 11.2])["accepted"]  # the same slope, exact


def test_the_slopes_standard_error_is_the_textbook_one():
    from conformance.calibrate.fit_quality import slope_standard_error

    xs, ys = SEGMENTS, _timings(12e-3, 0.3e-6, 0.03)
    (b_ref, _), cov = np.polyfit(xs, ys, 1, cov=True)  # residual variance over n - 2 degrees of freedom
    b, se, rmse = slope_standard_error(xs, ys)
    assert b == pytest.approx(b_ref, rel=1e-9) and se == pytest.approx(math.sqrt(cov[0, 0]), rel=1e-9)
    res = ys - np.polyval(np.polyfit(xs, ys, 1), xs)
    assert rmse == pytest.approx(math.sqrt(np.mean(res ** 2)), rel=1e-9)
    assert slope_standard_error([1, 2], [1, 3])[1] == math.inf  # two points: no error to speak of


SMALL = ["calibrate", "--sizes", "1MiB,2MiB", "--repeat", "3", "--translation-sizes", "2MiB,4MiB", "--quiet"]


@pytest.mark.slow
def test_a_poorly_known_slope_is_not_written_without_accept_poor_fit(tmp_path, capsys, monkeypatch):
    from conformance.calibrate import fit_quality

    out = tmp_path / "box.yaml"
    monkeypatch.setattr(fit_quality, "REL_RMSE_MAX", 0.0)  # no timed line is exactly straight: all refused
    assert main([*SMALL, "--out", str(out)]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: --out: {out} not written: per-segment fit: the points lie ")
    assert "--accept-poor-fit" in err[0] and not out.exists() and not list(tmp_path.iterdir())
    assert "per segment" in captured.out and "+/-" in captured.out  # the figures and their errors still print
    assert main([*SMALL, "--out", str(out), "--accept-poor-fit"]) == 0
    assert "poor fit accepted" in load_profile(out).sources["link.per_segment_us"]
    assert capsys.readouterr().err.startswith("hicache: warning: per-segment fit: ")
    monkeypatch.setattr(fit_quality, "REL_RMSE_MAX", math.inf)
    monkeypatch.setattr(fit_quality, "REL_SE_MAX", math.inf)
    again = tmp_path / "any.yaml"
    assert main([*SMALL, "--out", str(again)]) == 0 and again.exists()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv, where", [
    (["--sizes", "4MiB"], "--sizes"),
    (["--sizes", "nope"], "--sizes"),
    (["--out", "/nonexistent-dir/x.yaml"], "--out"),
    (["--out", "x.txt"], "--out"),
    (["--backend", "xpu"], "--backend"),
    (["--repeat", "1"], "--repeat"),
    (["--translation-sizes", "1MiB"], "--translation-sizes"),  # below one huge page
    (["--translation-sizes", "64MiB,nope"], "--translation-sizes"),
    (["--translation-sizes", "64TiB"], "--translation-sizes"),  # two of them do not fit this machine
])
def test_bad_input_is_one_line_exit_2(argv, where, capsys):
    assert main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hicache: {where}") and "\n" not in err


@pytest.mark.slow
def test_a_device_that_reports_its_memory_gets_it_written_and_advise_sizes_l1_from_it(tmp_path, monkeypatch, capsys):
    """p800's card memory has no public figure: calibrate on the node writes what the runtime reports
    (device.hbm_gib, measured), and advise --model then sizes L1 without --l1-tokens."""
    out = tmp_path / "p800node.yaml"
    assert main([*SMALL, "--profile", "p800", "--out", str(tmp_path / "plain.yaml"), "--accept-poor-fit"]) == 0
    assert load_profile(tmp_path / "plain.yaml").device.hbm_gib is None  # emu's device is host memory: not invented
    assert "device memory: not measured" in capsys.readouterr().out
    monkeypatch.setattr("hal.backends.emu.EmuBackend.device_memory_bytes", lambda self: 96 << 30)
    assert main([*SMALL, "--profile", "p800", "--out", str(out), "--accept-poor-fit"]) == 0
    profile = load_profile(out)
    assert profile.device.hbm_gib == 96.0
    assert profile.sources["device.hbm_gib"].startswith("measured: `hicache calibrate")
    capsys.readouterr()
    assert main(["advise", "--model", "deepseek-v3", "--tp", "8", "--profile", str(out), "--limit", "50",
                 "--quiet", "--json"]) == 0
    assert "l1" in capsys.readouterr().out.lower()


def test_without_a_card_memory_figure_advise_names_the_option_and_the_measuring_command(capsys):
    assert main(["advise", "--model", "deepseek-v3", "--profile", "p800", "--limit", "5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--l1-tokens" in err and "device.hbm_gib" in err and "hicache calibrate" in err


@pytest.mark.slow
def test_a_calibrated_profile_calibrated_again_says_its_calibration_once(tmp_path):
    """Calibrating the written profile again (a later run on the node) replaces the calibration
    sentence of the description; it was appended again on every run."""
    first, second = tmp_path / "node.yaml", tmp_path / "node2.yaml"
    assert main([*SMALL, "--profile", "p800", "--out", str(first), "--accept-poor-fit"]) == 0
    assert main([*SMALL, "--profile", str(first), "--out", str(second), "--accept-poor-fit"]) == 0
    description = load_profile(second).description
    assert description.count("calibrated by hicache calibrate") == 1, description
    assert description.startswith(load_profile("p800").description) and "as in profile node." in description


@pytest.mark.slow
def test_a_backend_that_moves_no_bytes_is_refused_and_a_profile_that_would_not_load_is_not_written(
        tmp_path, monkeypatch, capsys):
    """`--backend count` measured its bookkeeping as a link of 1,000 GB/s; and a measured figure the
    profile schema refuses left both files written, the YAML one --profile cannot load."""
    from conformance.calibrate import measure

    out = tmp_path / "box.yaml"
    assert main([*SMALL, "--backend", "count", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("hicache: --backend: count moves no bytes")
    real = measure.calibrate

    def beyond_the_schema(*args, **kwargs):
        cal = real(*args, **kwargs)
        cal["link"]["h2d_gbps"] = 5000.0  # past the (0, 1000] GB/s a profile holds
        return cal

    monkeypatch.setattr(measure, "calibrate", beyond_the_schema)
    assert main([*SMALL, "--out", str(out), "--accept-poor-fit"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: --out: {out} not written") and "h2d_gbps" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.slow
def test_transfer_sizes_under_a_mebibyte_are_printed_as_given(capsys):
    """`--sizes 64KiB,...` printed its row as '0 MiB'."""
    assert main(["calibrate", "--sizes", "64KiB,1536KiB", "--repeat", "3", "--translation-sizes", "2MiB,4MiB",
                 "--quiet"]) == 0
    rows = [line[:11].strip() for line in capsys.readouterr().out.splitlines()[2:4]]
    assert rows == ["64 KiB", "1.5 MiB"], rows
