"""`hicache bench spmd`: shared vs private in one run, the expected 1/N ratios, the self-check's cost."""

from __future__ import annotations

import json

import pytest

from conformance.cli import main


@pytest.mark.slow
def test_bench_spmd_reports_one_nth_host_and_d2h_bytes(capsys):
    assert main.main(["bench", "spmd", "--tp", "2", "--ops", "40", "--repeat", "1", "--json", "--quiet"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["host_bytes_ratio"] == r["d2h_bytes_ratio"] == 0.5 and r["same_digest"]
    assert r["shared"]["d2h_bytes_by_rank"]["1"] == 0 and r["private"]["d2h_bytes_by_rank"]["1"] > 0
    assert r["shared_unchecked"]["log_fraction"] == 0 and r["shared"]["wall_seconds"] > 0
    assert isinstance(r["self_check_overhead"], float)


def test_bench_spmd_refuses_a_bad_shared_dir(capsys):
    assert main.main(["bench", "spmd", "--shared-dir", "/nonexistent"]) == 2
    assert capsys.readouterr().err.strip() == "hicache: --shared-dir: /nonexistent does not exist"
