"""report.json and report.html of a `hicache conform` run, built from junit.xml, the target rows
the suite wrote, the environment and the figures; both written atomically."""

from __future__ import annotations

import datetime
import json
import textwrap
from pathlib import Path

from conformance.report import environment as env_mod
from conformance.report import html, plot_data
from conformance.report.answer import answer
from conformance.report.junit_cases import read_cases
from conformance.report.report_schema import SCHEMA_ID
from conformance.report.target_rows import collect, counts, split_counts

TARGETS_DIR = "targets"  # OUT/targets/<target>.json, written by conformance/suites/test_targets.py


def build(summary, out: Path, profile, backend=None, backend_reason: str | None = None,
          rows_dir: Path | None = None) -> dict:
    """The report.json document. `backend`: an instance to measure the bandwidth sweep on (None:
    unavailable here; the sweep is left out); `rows_dir`: where the target rows are (default OUT/targets)."""
    cases = read_cases(summary.junit)
    rows = collect(profile, out / TARGETS_DIR if rows_dir is None else rows_dir, cases)
    summary.answer, summary.target_counts = answer(profile, rows), counts(rows)
    failed = [r["name"] for r in rows if r["verdict"] == "fail" and r.get("kind") != "reading"]
    verdict = summary.verdict
    if failed and verdict != "FAIL":
        verdict = "FAIL"
    return {
        "schema": SCHEMA_ID,
        "verdict": verdict,
        "ok": verdict == "PASS",
        "not_run_reason": summary.not_run_reason if verdict == "NOT RUN" else None,
        "partial_reason": summary.partial_reason if verdict == "PARTIAL" else None,
        "answer": summary.answer,
        "model_verdict": summary.model_verdict,
        "failed_readings": [r["name"] for r in rows if r["verdict"] == "fail" and r.get("kind") == "reading"],
        "summary": summary.to_json(),
        "tests": cases,
        "targets": rows,
        "target_counts": summary.target_counts,
        "unchecked_targets": [r["name"] for r in rows if r["verdict"] == "not_measured"],
        "failed_targets": failed,
        "assumptions": {} if profile is None else dict(profile.assumptions()),
        "environment": env_mod.environment(summary.backend, profile, backend_reason),
        "figures": plot_data.gather(profile, backend),
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _atomic(path: Path, text: str) -> None:
    from conformance.common.safe_write import write_text

    write_text(path, text)


def write(report: dict, out: Path) -> tuple[Path, Path]:
    """OUT/report.json and OUT/report.html."""
    j, h = out / "report.json", out / "report.html"
    _atomic(j, json.dumps(report, indent=1, default=str) + "\n")
    _atomic(h, html.render(report))
    return j, h


# Console text of a reason or a source: wrapped on words at this width, at most this many characters
# (cut on a word, with an ellipsis); report.json and report.html keep every word.
WRAP_COLUMNS, TEXT_CHARS = 100, 320


def _wrapped(text: str, indent: str) -> list[str]:
    short = textwrap.shorten(str(text), TEXT_CHARS, placeholder=" ...")
    return textwrap.wrap(short, WRAP_COLUMNS, initial_indent=indent, subsequent_indent=indent + "    ",
                         break_long_words=False, break_on_hyphens=False) or [indent]


def target_counts_line(report: dict) -> str:
    """Target counts (the readings apart, reading_counts_line) with measured and modeled passes
    apart: a modeled pass checks the profile's model, not this backend."""
    t, _ = split_counts(report)
    return (f"targets: {t['measured_pass']} measured pass, {t['modeled_pass']} modeled pass, {t['fail']} fail, "
            f"{t['not_measured']} not measured of {t['total']}")


def reading_counts_line(report: dict) -> str | None:
    """The readings (modeled targets) on their own line; None when the profile has none."""
    _, r = split_counts(report)
    if not r["total"]:
        return None
    return (f"readings (modeled on the seed scenario, not measured here): {r['modeled_pass']} PASS (modeled), "
            f"{r['fail']} FAIL (modeled), {r['not_measured']} not measured of {r['total']}")


def _value(row: dict) -> str:
    return "no figure" if row["value"] is None else f"{row['value']:.6g} {row['unit']}"


def summary_lines(report: dict) -> list[str]:
    """What the console summary adds: target and reading counts, failed and unchecked ones (a failed
    reading with its reason), assumed inputs."""
    lines = [target_counts_line(report)]
    readings = reading_counts_line(report)
    if readings:
        lines.append(readings)
    for row in report["targets"]:
        if row["verdict"] != "fail":
            continue
        if row.get("kind") == "reading":
            lines.extend(_wrapped(f"FAIL (modeled) reading {row['name']}: {row['reason']}", "  "))
        else:
            lines.append(f"  FAIL {row['name']}: {_value(row)}, target {row['comparator']} "
                         f"{row['target']:g} ({row['basis']})")
    if report["unchecked_targets"]:
        lines.append("unchecked targets (not measured):")
        for row in report["targets"]:
            if row["verdict"] == "not_measured":
                lines.extend(_wrapped(f"{row['name']}: {row['reason']}", "  "))
    if report["assumptions"]:
        lines.append("assumed inputs (replace with measured values; `hicache calibrate` measures the link):")
        for key, source in report["assumptions"].items():
            lines.extend(_wrapped(f"{key}: {source}", "  "))
    modeled = [r["name"] for r in report["targets"] if r["basis"] == "modeled" and r["verdict"] != "not_measured"
               and r.get("kind") != "reading"]
    if modeled:
        lines.append(f"modeled, not measured on this backend: {', '.join(modeled)}")
    return lines
