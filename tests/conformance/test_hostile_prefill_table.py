"""A hostile pass on `hicache calibrate --prefill/--allhit` (docs/hostile-cases.md, round 4): a term
written as measured carries the uncertainty of the assumed values it was computed from, and a table
whose row says one thing twice (a duplicate key or column, two TTFT columns that disagree) is
refused naming the file, line and key."""

from __future__ import annotations

import json
import math

import pytest

from conformance.cli.main import main
from hardware_profiles import load_profile


def _allhit(tmp_path):
    path = tmp_path / "allhit.csv"
    rows = "".join(f"{n},{0.78 + 1.35e-5 * n + 0.001 * (k - 1):.6f}\n" for n in (1000, 4000, 16000, 32000) for k in range(3))
    path.write_text("input_len,ttft_s\n" + rows)
    return path


@pytest.mark.parametrize("base", ["p900", "h200"])
def test_an_all_hit_table_over_assumed_values_carries_their_ranges(tmp_path, capsys, base):
    """p900's prefill floor is assumed anywhere in 0.3-1.0 s: its L2 path was written `measured`
    0.044 +/- 0.0016 s, the range dropped (and H2D's and the launches' likewise)."""
    out = tmp_path / "mine.yaml"
    assert main(["calibrate", "--allhit", str(_allhit(tmp_path)), "--profile", base, "--out", str(out)]) == 0
    b, p = load_profile(base), load_profile(out)
    lo, hi = b.ranges["compute.prefill_fixed_s"]
    assert p.stderrs["compute.l2_path_fixed_s"] >= (hi - lo) / math.sqrt(12) * 0.999
    h_lo, h_hi = b.ranges["link.h2d_gbps"]
    layers = 78 if base == "p900" else 61
    token_bytes = 89856 if base == "p900" else 70272
    h2d = b.link.h2d_gbps
    floor_se = token_bytes * (h_hi - h_lo) / math.sqrt(12) / (h2d * h2d * 1e9) / layers * 1e6
    assert p.stderrs["link.kernel_per_item_us"] >= floor_se * 0.999


def _refused(capsys, path, *what):
    assert main(["calibrate", "--prefill", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hicache: --prefill: "), err
    for w in what:
        assert w in err[0], err[0]


LENGTHS = (1000, 2000, 4000, 8000, 16000)


def test_a_duplicate_key_in_a_json_row_is_refused_naming_it(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"input_len": n, "ttft": 0.1 + n * 1e-5}) + "\n" for n in LENGTHS)
                    + '{"input_len": 1000, "input_len": 32000, "ttft": 0.2}\n')
    _refused(capsys, path, "t.jsonl: line 6", "input_len", "twice")


def test_a_duplicate_column_in_a_csv_is_refused_naming_it(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("input_len,ttft_ms,ttft_ms\n" + "".join(f"{n},{100 + n / 100},{90 + n / 50}\n" for n in LENGTHS))
    _refused(capsys, path, "t.csv: line 1", "ttft_ms", "twice")


@pytest.mark.parametrize("header, row", [("input_len,ttft_s,ttft_ms", "{n},0.06,60000"),
                                         ("input_len,prompt_len,ttft_s", "{n},{m},0.06")])
def test_two_columns_for_one_figure_that_disagree_are_refused(tmp_path, capsys, header, row):
    """ttft_s 0.06 beside ttft_ms 60000 (a minute): the first in the reader's order was taken silently."""
    path = tmp_path / "t.csv"
    path.write_text(header + "\n" + "".join(row.format(n=n, m=2 * n) + "\n" for n in LENGTHS))
    _refused(capsys, path, "t.csv: line 2", "disagree")


def test_two_columns_for_one_figure_that_agree_are_read(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("input_len,prompt_tokens,ttft_s,ttft_ms\n" + "".join(
        f"{n},{n},{0.05 + 2e-5 * n + 3e-10 * n * n + k * 1e-4:.6f},{(0.05 + 2e-5 * n + 3e-10 * n * n + k * 1e-4) * 1e3:.3f}\n"
        for n in LENGTHS for k in range(3)))
    assert main(["calibrate", "--prefill", str(path)]) == 0


def test_a_benchmark_summary_without_per_request_figures_says_which_flag_saves_them(tmp_path, capsys):
    """vLLM's --save-result without --save-detailed holds means only: it was told 'no one of input_len, ...'."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"completed": 50, "mean_ttft_ms": 120.0, "median_ttft_ms": 110.0}))
    _refused(capsys, path, "result.json: line 1", "without per-request figures", "--output-details", "--save-detailed")
