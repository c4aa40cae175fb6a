"""`hicache calibrate --prefill FILE [--allhit FILE]`: known coefficients recovered from a noisy
synthetic TTFT table within their standard errors, written into the profile as measured; tables
that cannot determine the terms refused with what to measure; bad input one line naming file and line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conformance.calibrate import prefill_fit, ttft_table
from conformance.cli.main import main
from hardware_profiles import load_profile
from hicache_ref.sim.prefill_model import require_compute

FIXED, A, B = 0.30, 2.0e-5, 1.5e-9  # s, s/token, s/pair
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
NOISE_S = 0.01


def _table(seed: int = 7, repeat: int = 10, lengths=LENGTHS) -> tuple[list[int], list[float]]:
    rng = np.random.default_rng(seed)
    ns = [n for n in lengths for _ in range(repeat)]
    return ns, [FIXED + A * n + B * n * n + float(rng.normal(0, NOISE_S)) for n in ns]


def _write_bench(path, ns, ys, errors=None):
    """As SGLang's bench_serving --output-details / vLLM's benchmark_serving --save-result write it."""
    doc = {"backend": "sglang", "input_lens": ns, "output_lens": [1] * len(ns), "ttfts": ys,
           "errors": errors or [""] * len(ns), "mean_ttft_ms": 1e3 * float(np.mean(ys))}
    path.write_text(json.dumps(doc) + "\n")
    return path


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_known_coefficients_are_recovered_within_their_standard_errors(seed):
    fit = prefill_fit.fit_no_hit([(n, y, i) for i, (n, y) in enumerate(zip(*_table(seed), strict=True))])
    t = fit["terms"]
    for key, truth in (("prefill_fixed_s", FIXED), ("prefill_per_token_s", A), ("prefill_per_token_pair_s", B)):
        value, se = t[key]["value"], t[key]["stderr"]
        assert abs(value - truth) <= 3 * se, (key, value, truth, se)
        assert se < 0.1 * truth  # the table determines it well, not by a wide error
    assert fit["dof"] == 57 and fit["rmse_s"] == pytest.approx(NOISE_S, rel=0.3)


def test_the_cli_writes_the_fit_as_measured_with_stderr_and_the_l2_path(tmp_path, capsys):
    nohit = _write_bench(tmp_path / "nohit.jsonl", *_table())
    rng = np.random.default_rng(3)
    allhit = tmp_path / "allhit.csv"
    allhit.write_text("input_len,ttft_ms\n" + "".join(
        f"{n},{(FIXED + 0.045 + 13.5e-6 * n + rng.normal(0, 0.002)) * 1e3}\n" for n in (1024, 8192, 32768) * 4))
    out = tmp_path / "mine.yaml"
    rc = main(["calibrate", "--prefill", str(nohit), "--allhit", str(allhit), "--profile", "h200", "--out", str(out)])
    assert rc == 0
    p = load_profile(out)
    c = p.compute
    assert c.known and c.prefill_per_token_pair_s == pytest.approx(B, rel=0.05)
    for key in ("prefill_fixed_s", "prefill_per_token_s", "prefill_per_token_pair_s", "l2_path_fixed_s"):
        assert p.sources[f"compute.{key}"].startswith("measured: `hicache calibrate --prefill")
        assert p.stderrs[f"compute.{key}"] > 0 and f"compute.{key}" not in p.ranges
    # the all-hit intercept less the fitted fixed part and 61 launches at h200's assumed 5 us
    assert abs(c.l2_path_fixed_s - (0.045 - 61 * 5e-6)) <= 3 * p.stderrs["compute.l2_path_fixed_s"]
    assert require_compute(p) is c  # measured terms win over first principles
    assert "prefill_per_token_pair_s = " in capsys.readouterr().out


def test_failed_requests_are_left_out(tmp_path):
    ns, ys = _table()
    ys[0], errors = 0.0, ["timeout"] + [""] * (len(ns) - 1)  # a failed request has no TTFT
    rows = ttft_table.read_table(_write_bench(tmp_path / "t.json", ns, ys, errors))
    assert len(rows) == len(ns) - 1


@pytest.mark.parametrize("lengths, repeat, says", [
    ((4096, 8192), 10, "2 distinct prompt length(s)"),
    ((8192, 12288, 16384), 10, "span only 8,192-16,384 tokens"),
    ((1024, 8192, 32768), 1, "3 requests leave no residual"),
])
def test_a_degenerate_table_is_refused_saying_what_to_measure(tmp_path, capsys, lengths, repeat, says):
    table = _write_bench(tmp_path / "t.jsonl", *_table(lengths=lengths, repeat=repeat))
    out = tmp_path / "never.yaml"
    assert main(["calibrate", "--prefill", str(table), "--profile", "h200", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hicache: --prefill: ") and says in err
    assert "measure no-hit TTFTs at 4 or more prompt lengths" in err
    assert not out.exists()


def test_a_negative_term_beyond_its_error_is_refused(tmp_path, capsys):
    ns = [n for n in LENGTHS for _ in range(5)]
    ys = [1.0 + 3e-5 * n - 2e-10 * n * n for n in ns]  # concave: not a prefill
    ys = [y + 1e-4 * ((i % 3) - 1) for i, y in enumerate(ys)]
    assert main(["calibrate", "--prefill", str(_write_bench(tmp_path / "t.jsonl", ns, ys))]) == 2
    assert "negative beyond its error" in capsys.readouterr().err


@pytest.mark.parametrize("text, says", [
    ('{"input_lens": [1, 2], "ttfts": [0.1]}\n', "line 1: 2 input_lens but 1 ttfts"),
    ('{"input_lens": [100], "ttfts": [0.1]}\n{"prompt_len": 100}\n', "line 2: no one of ttft"),
    ('{"prompt_len": 1.5, "ttft": 0.2}\n', "line 1: prompt length '1.5' is not a whole number"),
    ('{"prompt_len": 100, "ttft": "fast"}\n', "line 1: TTFT 'fast' is not a time"),
    ('{"prompt_len": 100, "ttft": 1e999}\n', "line 1: TTFT"),
    ('[1, 2]\n', "line 1: expected a JSON object"),
    ('{"input_lens": [1]\n', "line 1: not JSON"),
    ('{"ttfts": [0.1]}\n', "without the list input_lens (run SGLang's bench_serving with --output-details)"),
    ('{"prompt_len": 1' + "0" * 30 + ', "ttft": 0.1}\n', "line 1: not JSON"),
])
def test_bad_rows_are_one_line_naming_file_and_line(tmp_path, capsys, text, says):
    table = tmp_path / "bad.jsonl"
    table.write_text(text)
    assert main(["calibrate", "--prefill", str(table)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{table}: " in err and says in err, err


def test_csv_rows_and_their_errors_name_the_line(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("prompt_tokens,ttft_s\n100,0.2\n200,oops\n")
    assert main(["calibrate", "--prefill", str(table)]) == 2
    assert "line 3: TTFT 'oops'" in capsys.readouterr().err


def test_an_oversized_table_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ttft_table, "MAX_TABLE_BYTES", 100)
    table = _write_bench(tmp_path / "big.jsonl", *_table())
    assert main(["calibrate", "--prefill", str(table)]) == 2
    assert "over the 0 MiB a TTFT table may take" in capsys.readouterr().err


def test_the_fit_is_reproducible_bit_for_bit(tmp_path, capsys):
    table = _write_bench(tmp_path / "t.jsonl", *_table())
    docs = []
    for _ in range(2):
        assert main(["calibrate", "--prefill", str(table), "--json"]) == 0
        docs.append(capsys.readouterr().out)
    assert docs[0] == docs[1] and json.loads(docs[0])["no_hit"]["requests"] == 60


def test_an_exact_table_writes_the_terms_without_a_zero_stderr(tmp_path):
    ns = [n for n in LENGTHS for _ in range(2)]
    table = _write_bench(tmp_path / "exact.jsonl", ns, [0.25 + 1e-5 * n + 1e-9 * n * n for n in ns])
    out = tmp_path / "exact.yaml"
    assert main(["calibrate", "--prefill", str(table), "--profile", "h200", "--out", str(out)]) == 0
    p = load_profile(out)
    assert p.compute.prefill_per_token_pair_s == pytest.approx(1e-9, rel=1e-6)
    assert all(v > 0 for v in p.stderrs.values())
