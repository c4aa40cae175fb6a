"""ci/device-check.sh: its arguments, the steps it runs (a fake hicache records them), and the dry run on emu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "device-check.sh"

# Stands in for `hicache`: logs its arguments, answers like the subcommands would. FAKE_CALIBRATE=0
# makes it a build without `calibrate`; FAKE_CONFORM_RC sets conform's exit.
FAKE = r'''#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
case "$1" in
  --version) echo "hicache 0.0-fake" ;;
  backends) echo '{"backends": [{"name": "cuda", "copy_modes": ["descriptor", "gather"]},
                                {"name": "emu", "copy_modes": []}]}' ;;
  calibrate) [ "${FAKE_CALIBRATE:-1}" = 1 ] || { echo "invalid choice: 'calibrate'" >&2; exit 2; }
             [ "$2" = --help ] && exit 0; echo '{}' ;;
  conform) while [ $# -gt 0 ]; do [ "$1" = --out ] && out="$2"; shift; done
           mkdir -p "$out"; rc="${FAKE_CONFORM_RC:-0}"
           v=PASS; [ "$rc" = 3 ] && v="NOT RUN"; [ "$rc" = 1 ] && v=FAIL
           echo "{\"verdict\": \"$v\"}" > "$out/summary.json"; exit "$rc" ;;
  *) echo '{}' ;;
esac
'''


def _run(args, tmp_path, env=None, real=False):
    full = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHON": sys.executable, **(env or {})}
    if not real:
        fake = tmp_path / "fake-hicache"
        fake.write_text(FAKE)
        fake.chmod(0o755)
        full.update(HICACHE=str(fake), FAKE_LOG=str(tmp_path / "calls.log"))
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=300)


def _calls(tmp_path) -> list[str]:
    return (tmp_path / "calls.log").read_text().splitlines()


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("args, message", [
    ([], "device-check: OUTDIR: missing"),
    (["--backend"], "device-check: --backend: expects cuda, xpu or emu"),
    (["--backend", "tpu", "x"], "device-check: --backend: 'tpu' is not cuda, xpu or emu"),
    (["--fast", "x"], "device-check: --fast: unknown option"),
    (["a", "b"], "device-check: b: one OUTDIR only"),
])
def test_bad_arguments_are_one_line_exit_2(tmp_path, args, message):
    r = _run(args, tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert r.stderr.startswith(message)


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_used_outdir_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.json").write_text("{}")
    r = _run([str(tmp_path / "out")], tmp_path)
    assert r.returncode == 2 and "exists and is not an empty folder" in r.stderr


@pytest.mark.slow  # runs the command or pytest in a child process
def test_device_run_runs_every_step_with_the_backend_profile_and_both_copy_modes(tmp_path):
    out = tmp_path / "out"
    r = _run(["--backend", "cuda", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr
    calls = _calls(tmp_path)
    assert "backends --json" in calls
    assert "doctor --backend cuda --profile h200 --json" in calls  # cuda's default profile
    assert any(c.startswith(f"calibrate --backend cuda --profile h200 --out {out}/calibrated-profile.yaml") for c in calls)
    assert f"conform --backend cuda --profile h200 --out {out}/conform" in calls
    for mode in ("descriptor", "gather"):
        assert f"bench transfer --backend cuda --profile h200 --copy-mode {mode} --repeat 3 --json --quiet" in calls
        assert (out / f"bench-transfer-{mode}.json").exists()
    report = json.loads((out / "device-check.json").read_text())
    assert report["status"] == "PASS" and report["conform_verdict"] == "PASS"
    assert [s["step"] for s in report["steps"]] == ["backends", "doctor", "calibrate", "conform",
                                                    "bench-transfer-descriptor", "bench-transfer-gather"]
    assert (out / "summary.txt").read_text().startswith("device check: PASS (backend cuda, profile h200")


@pytest.mark.slow  # runs the command or pytest in a child process
def test_xpu_defaults_to_p800_and_a_build_without_calibrate_skips_it_saying_so(tmp_path):
    out = tmp_path / "out"
    r = _run(["--backend=xpu", str(out)], tmp_path, {"FAKE_CALIBRATE": "0"})
    assert r.returncode == 0, r.stderr
    assert "calibrate: skipped: this hicache has no calibrate subcommand" in r.stderr
    assert "conform --backend xpu --profile p800 --out" in "\n".join(_calls(tmp_path))
    step = next(s for s in json.loads((out / "device-check.json").read_text())["steps"] if s["step"] == "calibrate")
    assert step["exit"] is None and "no calibrate subcommand" in step["reason"]


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("rc, status", [(3, "NOT RUN"), (1, "FAIL")])
def test_the_conformance_verdict_decides_the_exit(tmp_path, rc, status):
    out = tmp_path / "out"
    r = _run(["--profile", "p900", str(out)], tmp_path, {"FAKE_CONFORM_RC": str(rc)})
    assert r.returncode == rc
    report = json.loads((out / "device-check.json").read_text())
    assert report["status"] == status and report["profile"] == "p900"


@pytest.mark.slow  # runs the command or pytest in a child process
def test_dry_run_on_emu_passes_and_writes_the_report(tmp_path):
    out = tmp_path / "dry"
    r = _run(["--backend", "emu", "--quick", str(out)], tmp_path, real=True)
    # --quick runs a -k selection of the deciding suites: conform says PARTIAL (exit 4), never PASS
    assert r.returncode == 4, r.stdout + r.stderr
    report = json.loads((out / "device-check.json").read_text())
    assert report["status"] == "PARTIAL" and report["conform_verdict"] == "PARTIAL" and not report["failed_steps"]
    by_step = {s["step"]: s for s in report["steps"]}
    assert by_step["conform"]["exit"] == 4 and by_step["doctor"]["exit"] in (0, 1)
    assert "bench-transfer" in by_step  # emu has no copy modes: one benchmark
    bench = json.loads((out / "bench-transfer.json").read_text())
    assert bench["backend"] == "emu"
    backends = {b["name"] for b in json.loads((out / "backends.json").read_text())["backends"]}
    assert {"emu", "cuda", "xpu"} <= backends
    assert json.loads((out / "conform" / "summary.json").read_text())["verdict"] == "PARTIAL"
    assert (out / "env.txt").read_text().startswith("date: ")
