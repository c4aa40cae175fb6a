"""The Medium and Low cases of issue 41 that are one option or one stream: a subnormal or tiny
--rate, --hicache-ratio past sense, a closed stdout, a deleted working folder, file names that are
not UTF-8 in JSON, a memory figure of 400 digits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli.main import main
from conformance.common.outputs import clean_text, json_text
from hal.memory import budget

REPO = Path(__file__).resolve().parents[2]
SYNTH = ["--requests", "10", "--min-tokens", "512", "--max-tokens", "1024", "--reuse", "0.5"]


def one_line_err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("rate", ["1e-320", "1e-300", "1e-7"])
def test_a_rate_too_small_to_compute_with_is_named(tmp_path, capsys, rate):
    assert main(["trace", "synth", "--out", str(tmp_path / "t.jsonl"), *SYNTH, "--rate", rate]) == 2
    assert one_line_err(capsys).startswith("hicache: --rate: ") and not (tmp_path / "t.jsonl").exists()


def test_the_slowest_rate_allowed_writes_a_trace_the_reader_takes(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    assert main(["trace", "synth", "--out", str(path), *SYNTH, "--rate", "1e-6"]) == 0
    assert main(["trace", "stats", str(path)]) == 0


def test_a_hicache_ratio_past_sense_is_blamed_on_itself_in_a_short_line(capsys):
    assert main(["replay", "--hicache-ratio", "1e300", "--l1-tokens", "4k", "--limit", "5"]) == 2
    err = one_line_err(capsys)
    assert err.startswith("hicache: --hicache-ratio: ") and len(err) < 160, err


def test_a_memory_figure_past_a_million_gib_is_a_few_digits():
    assert budget.fmt(4.6e300) == f"{4.6e300 / budget.GIB:.3g} GiB" and len(budget.fmt(1e300)) < 20


def _shell(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_closed_stdout_is_an_error_not_a_silent_success(tmp_path):
    proc = _shell(f"{sys.executable} -m conformance.cli.main trace stats /dev/null >&-", tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "hicache: stdout: is closed; nothing could be printed (send it to /dev/null to discard it)"), proc.stderr


def test_a_deleted_working_folder_is_one_line_before_torch_is_imported(tmp_path):
    (tmp_path / "gone").mkdir()
    proc = _shell(f"cd gone && rmdir ../gone && {sys.executable} -m conformance.cli.main replay --limit 5", tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "hicache: the current folder was deleted; cd to a folder that exists"
    assert "oneMKL" not in proc.stderr


def test_a_file_name_that_is_not_utf8_is_valid_unicode_in_json(tmp_path, capsys):
    name = os.fsdecode(b"bad\xff.jsonl")
    assert main(["trace", "synth", "--out", str(tmp_path / name), *SYNTH, "--json"]) == 0
    out = capsys.readouterr().out
    out.encode("utf-8")  # no lone surrogate left
    assert json.loads(out)["out"].endswith("bad\\xff.jsonl")
    assert clean_text({"a": [name]}) == {"a": ["bad\\xff.jsonl"]} and json_text("ok") == '"ok"'


@pytest.mark.parametrize("key,value", [("concurrency", 10**9), ("tp", 100_000)])
def test_a_readings_scenario_out_of_range_names_the_file_and_its_key_not_an_option(key, value):
    import dataclasses

    from hardware_profiles import load_profile
    from hardware_profiles.readings import load_readings
    from hicache_ref.sim.seed_scenario import seed_base

    profile = load_profile("p800")
    readings = load_readings(profile)
    bad = dataclasses.replace(readings, scenario={**readings.scenario, key: value})
    with pytest.raises(ValueError) as err:
        seed_base(bad, profile)
    msg = str(err.value)
    assert msg.startswith(f"{readings.path}: scenario.{key}:") and "--" not in msg
