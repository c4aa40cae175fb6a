"""`hicache conform --engine`: the engine reaches the targets that replay (the profile's readings,
on the seed scenario); a state it cannot run here, or does not run, leaves those readings not
measured with the reason (a skip, never a pass), the others are judged as on the reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli.main import main
from hicache_ref.engines.sglang.pin import unavailable_reason

ROOT = str(Path(__file__).resolve().parents[2])
_WHY = unavailable_reason()
# Where SGLang is absent the replayed readings are left out with the reason. Installed, the seed
# scenario's pools (400K L1 and 75 GB of L2 per card: ~103 GiB at its rows, ~592 GiB with the TP
# group's shared pool) do not fit a 64 GiB budget, so upstream runs on one-layer rows priced at the
# scenario's (hicache_ref.engines.sglang.copy_pricing) and the readings are judged. The budget stands for
# the machine's memory: installed, 4 GiB holds the one-layer pools (~1.8 GB with the shared pool).
BUDGET = "64GiB" if _WHY is not None else "4GiB"
NOT_RUN_PREFIX = f"NOT RUN: engine sglang: {_WHY}" if _WHY is not None else "NOT RUN on engine sglang: "
REPLAYED = ("hit_rate_hicache", "ttft_all_fixes", "numa_local")  # HiCache-on states of the seed scenario


@pytest.mark.slow  # runs the command or pytest in a child process
def test_bad_engine_is_one_line_naming_the_option(capsys, tmp_path):
    assert main(["conform", "--engine", "vllm", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hicache: --engine: ") and "vllm" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # runs the command or pytest in a child process
def test_an_engine_with_storage_is_refused_not_ignored(capsys, tmp_path):
    assert main(["conform", "--storage", "memory:", "--engine", "sglang", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hicache: --engine: ") and "replays nothing" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_the_engine_reaches_the_suites():
    import argparse

    from conformance.cli.conform import add_arguments, pytest_command

    p = argparse.ArgumentParser()
    add_arguments(p)
    cmd = pytest_command(p.parse_args(["-n", "0", "--engine", "sglang"]), None, Path("out"))
    assert cmd[cmd.index("--engine") + 1] == "sglang"
    assert (
        pytest_command(p.parse_args(["-n", "0"]), None, Path("out"))[cmd.index("--engine") + 1] == "reference"
    )


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.needs_sglang  # in both environments: NOT RUN without SGLang, judged with it
def test_replayed_readings_are_not_run_on_an_engine_that_does_not_run_them(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": ROOT, "HICACHE_MEMORY_BUDGET": BUDGET}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.cli.main",
            "conform",
            "--profile",
            "p800",
            "-k",
            "test_reading",
            "--engine",
            "sglang",
            "-n",
            "0",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=ROOT,
    )
    assert r.returncode == 4, r.stdout[-3000:] + r.stderr[-3000:]  # PARTIAL: -k runs a subset
    rows = {
        t["name"]: t
        for t in json.loads((out / "report.json").read_text())["targets"]
        if t["kind"] == "reading"
    }
    for name in REPLAYED:
        row = rows[name]
        if _WHY is None:  # replayed by upstream's cache, judged against the seed's reading
            assert row["verdict"] in ("pass", "fail") and row["value"] is not None, row
            continue
        assert (row["verdict"], row["value"]) == ("not_measured", None)
        assert row["reason"].startswith(NOT_RUN_PREFIX), row["reason"]
        assert f"not measured: reading {name}: {row['reason']}" in r.stdout
    # HiCache off stays the reference's replay, and readings that replay nothing are judged as ever
    assert rows["hit_rate_l1_only"]["verdict"] == "pass" and rows["hit_rate_l1_only"]["value"] is not None
    assert all(t["reason"].startswith(NOT_RUN_PREFIX) for t in rows.values() if t["verdict"] == "not_measured")
    if _WHY is not None:
        assert f"hicache conform: NOT RUN: engine sglang: {_WHY}" in r.stdout
