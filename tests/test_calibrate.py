"""`hicache calibrate` on emu: writes a profile that loads, with measured sources, and bandwidth near a
memcpy of the same run; its samples and fits (with residuals) are kept beside it."""

from __future__ import annotations

import json
import os
import time

import pytest

from conformance.cli.main import main
from hardware_profiles import load_profile


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrate") / "thisbox.yaml"
    t0 = time.perf_counter()
    rc = main(["calibrate", "--backend", "emu", "--out", str(out), "--sizes", "16MiB,64MiB,256MiB", "--repeat", "9",
               "--quiet"])
    assert time.perf_counter() - t0 < 60  # issue 10: calibrate on emu under a minute
    return rc, out


def test_calibrate_writes_a_loadable_measured_profile(calibrated):
    rc, out = calibrated
    assert rc == 0
    profile = load_profile(out)
    for key in ("h2d_gbps", "d2h_gbps", "per_segment_us", "per_launch_us", "registration_s_per_gib"):
        assert profile.sources[f"link.{key}"].startswith("measured: `hicache calibrate"), key
        assert getattr(profile.link, key) is not None
    assert not any(k.startswith("link.") for k in profile.assumptions())  # the link's assumptions are replaced
    assert profile.targets == load_profile("emu").targets  # everything but the link kept from the base


def _ratios(cal: dict) -> dict[str, float]:
    return {d: cal["bandwidth"][d][-1]["ratio_vs_memcpy"] for d in ("h2d", "d2h")}


def test_calibrated_bandwidth_is_within_20pct_of_memcpy_in_the_same_run(calibrated, tmp_path):
    _, out = calibrated
    cal = json.loads(out.with_name("thisbox.calibration.json").read_text())
    # Transfer and memcpy alternate round by round, and the median of their per-round ratio is
    # compared. On a host loaded past its cores (this suite's own workers, other jobs) the emu
    # stream's thread hand-offs wait for a core while the inline memcpy does not; such a
    # calibration is retaken (at most twice), as an engineer would retake a disturbed run.
    def within(c):
        return all(abs(r - 1.0) <= 0.20 for r in _ratios(c).values())

    attempts = [cal]
    while not within(attempts[-1]) and len(attempts) < 3 and os.getloadavg()[0] > (os.cpu_count() or 1):
        again = tmp_path / f"again{len(attempts)}.yaml"
        assert main(["calibrate", "--out", str(again), "--sizes", "16MiB,64MiB,256MiB", "--repeat", "9",
                     "--quiet"]) == 0
        attempts.append(json.loads(again.with_name(again.stem + ".calibration.json").read_text()))
    assert within(attempts[-1]), [_ratios(c) for c in attempts]
    cal = attempts[-1]
    assert cal["link"]["h2d_gbps"] == cal["bandwidth"]["h2d"][-1]["gbps"]


def test_calibration_keeps_fits_with_residuals(calibrated):
    _, out = calibrated
    cal = json.loads(out.with_name("thisbox.calibration.json").read_text())
    for block in (cal["segments"], cal["launches"]):
        fit = block["fit"]
        assert len(fit["residuals"]) == len(block["points"]) and "r2" in fit
    assert cal["bandwidth_fits"]["h2d"]["points"] == 3
    assert cal["registration"]["thp"] and cal["registration"]["4k"]
    assert cal["machine"]["host"] and cal["date"] and cal["command"].startswith("hicache calibrate")


@pytest.mark.parametrize("argv, where", [
    (["--sizes", "4MiB"], "--sizes"),
    (["--sizes", "nope"], "--sizes"),
    (["--out", "/nonexistent-dir/x.yaml"], "--out"),
    (["--out", "x.txt"], "--out"),
    (["--backend", "xpu"], "--backend"),
    (["--repeat", "1"], "--repeat"),
])
def test_bad_input_is_one_line_exit_2(argv, where, capsys):
    assert main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hicache: {where}") and "\n" not in err
