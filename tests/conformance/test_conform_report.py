"""`hicache conform --out DIR` writes junit.xml, report.json (valid against its schema: every test,
every target, environment, assumptions) and a self-contained report.html with plots and every target."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.cli.main import main
from conformance.report import report_schema as schema
from conformance.targets.reading_rows import reading_names
from hardware_profiles import load_profile

ROOT = Path(__file__).resolve().parents[2]
# the targets and one backup case; the readings (test_reading, the seed scenario's model) apart:
# tests/conformance/test_reading_targets.py runs them
SUBSET = "(test_target and not test_reading) or (backup and mla-ps16-bf16-128)"


@pytest.fixture
def child_sees_this_checkout(monkeypatch):
    # the pytest child must import this checkout's conformance, like the parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


@pytest.fixture(scope="module")
def p800_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("conform-p800")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), old) if p)
    try:
        rc = main(["conform", "--out", str(out), "-n", "0", "--profile", "p800", "-k", SUBSET])
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return rc, out


@pytest.mark.slow  # runs the command or pytest in a child process
def test_report_json_matches_its_schema_and_lists_every_target(p800_run):
    rc, out = p800_run
    assert rc == 4  # a subset of the deciding suites: PARTIAL
    ET.parse(out / "junit.xml")  # JUnit parses
    report = json.loads((out / "report.json").read_text())
    schema.validate(report)
    names = [t.name for t in load_profile("p800").targets]
    targets = [r for r in report["targets"] if r["kind"] == "target"]
    assert [r["name"] for r in targets] == names
    assert all(r["verdict"] == "pass" for r in targets), targets
    # every reading is listed, deselected: not measured, with why
    readings = [r for r in report["targets"] if r["kind"] == "reading"]
    assert [r["name"] for r in readings] == reading_names(load_profile("p800")) and readings
    assert all(r["verdict"] == "not_measured" and "did not run" in r["reason"] for r in readings)
    assert report["answer"]["ttft_change_pct"] is None and report["answer"]["readings_not_measured"] == len(readings)
    assert report["verdict"] == "PARTIAL" and report["failed_targets"] == [] and not report["ok"]
    assert "deselected" in report["partial_reason"] and report["not_run_reason"] is None
    assert {r["basis"] for r in targets} == {"measured", "modeled"}
    assert set(report["assumptions"]) == set(load_profile("p800").assumptions())
    env = report["environment"]
    assert env["backend"] == "emu" and env["profile"] == "p800" and env["kernel"] and env["torch"]
    assert env["topology"]["source"] == "profile" and env["doctor"]["checks"]
    assert len(report["tests"]) == report["summary"]["totals"]["tests"]


@pytest.mark.slow  # runs the command or pytest in a child process
def test_report_html_is_self_contained_with_plots_and_every_target(p800_run):
    _, out = p800_run
    page = (out / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) >= 3 and all(len(i) > 1000 for i in images)  # T(n) fit, bandwidth, layouts
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched: opens offline
    for t in load_profile("p800").targets:
        assert f'id="target-{t.name}"' in page
    for name in reading_names(load_profile("p800")):
        assert f'id="reading-{name}"' in page
    assert page.index('id="answer"') < page.index("<h2>Targets</h2>")  # the page opens with the answer


def test_a_schema_violation_is_caught():
    import jsonschema

    bad = {"name": "x", "value": None, "target": 1, "comparator": "<=", "unit": "B", "verdict": "not_measured",
           "basis": "measured", "reason": "", "source": "s"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema.TARGET_ROW)  # not_measured without a reason


@pytest.mark.slow  # runs the command or pytest in a child process
def test_deselected_targets_are_listed_not_measured(tmp_path, child_sees_this_checkout, capsys):
    rc = main(["conform", "--out", str(tmp_path), "-n", "0", "--profile", "p800", "-k",
               "test_target and ghost and not test_reading"])
    assert rc == 4  # -k left every test of the deciding suites out: PARTIAL, whatever the targets say
    report = json.loads((tmp_path / "report.json").read_text())
    schema.validate(report)
    assert report["verdict"] == "PARTIAL" and not report["ok"]
    rows = {r["name"]: r for r in report["targets"]}
    assert rows["ghost_entry_bytes"]["verdict"] == "pass"
    assert rows["h2d_gbps"]["verdict"] == "not_measured" and "did not run" in rows["h2d_gbps"]["reason"]
    assert "h2d_gbps" in report["unchecked_targets"]
    printed = capsys.readouterr().out
    assert "unchecked targets (not measured):" in printed and "assumed inputs" in printed


@pytest.mark.slow  # runs the command or pytest in a child process
def test_an_unavailable_backend_reports_measured_targets_not_measured(tmp_path, child_sees_this_checkout):
    rc = main(["conform", "--out", str(tmp_path), "-n", "0", "--backend", "xpu", "--profile", "p800",
               "-k", "test_target and not test_reading"])
    assert rc == 3  # NOT RUN, whatever the modeled targets say
    report = json.loads((tmp_path / "report.json").read_text())
    schema.validate(report)
    assert report["verdict"] == "NOT RUN" and not report["ok"]
    rows = {r["name"]: r for r in report["targets"]}
    assert rows["h2d_gbps"]["verdict"] == "not_measured" and "unavailable" in rows["h2d_gbps"]["reason"]
    assert rows["d2h_submit_block_s"]["verdict"] == "not_measured"
    assert report["figures"]["bandwidth"] is None


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_failed_target_fails_the_run_and_is_named(tmp_path, child_sees_this_checkout, capsys):
    text = (ROOT / "hardware_profiles" / "emu.yaml").read_text()
    text += ('  ghost_entry_bytes:\n    comparator: "<="\n    value: 1\n    tolerance: 0\n    unit: B\n'
             '    source: "test: no ghost list entry fits in one byte"\n')
    prof = tmp_path / "tight.yaml"
    prof.write_text(text)
    out = tmp_path / "out"
    rc = main(["conform", "--out", str(out), "-n", "0", "--profile", str(prof), "-k", "test_target and ghost"])
    assert rc == 1
    report = json.loads((out / "report.json").read_text())
    schema.validate(report)
    assert report["verdict"] == "FAIL" and report["failed_targets"] == ["ghost_entry_bytes"]
    assert "FAIL ghost_entry_bytes" in capsys.readouterr().out
    # a profile without readings: no reading rows, and the answer says there is no scenario
    assert [r["kind"] for r in report["targets"]] == ["target"] * len(report["targets"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["answer"]["scenario"] is None and summary["answer"]["readings_total"] == 0
    assert summary["answer"]["text"].startswith("no scenario: profile tight has no readings")


def _row(name, verdict, basis, reason="r"):
    return {"name": name, "metric": name, "value": None if verdict == "not_measured" else 1.0, "target": 2.0,
            "tolerance": 0, "comparator": "<=", "unit": "s", "verdict": verdict, "basis": basis,
            "reason": reason, "source": "s", "inputs": {}, "details": {}}


def test_target_counts_keep_measured_and_modeled_passes_apart():
    from conformance.report import document
    from conformance.report.target_rows import counts

    rows = [_row("a", "pass", "measured"), _row("b", "pass", "modeled"), _row("c", "pass", "modeled"),
            _row("d", "fail", "modeled"), _row("e", "not_measured", "measured")]
    c = counts(rows)
    assert (c["pass"], c["measured_pass"], c["modeled_pass"]) == (3, 1, 2)
    assert (c["fail"], c["modeled_fail"], c["measured_fail"], c["not_measured"]) == (1, 1, 0, 1)
    report = {"targets": rows, "target_counts": c, "unchecked_targets": ["e"], "assumptions": {}}
    assert document.summary_lines(report)[0] == "targets: 1 measured pass, 2 modeled pass, 1 fail, 1 not measured of 5"


def test_summary_wraps_long_text_on_words_and_marks_a_cut():
    from conformance.report import document

    words = " ".join(f"word{i}" for i in range(120))  # ~830 characters: longer than the console keeps
    report = {"targets": [_row("e", "not_measured", "measured", reason="short reason, kept whole")],
              "target_counts": {"pass": 0, "fail": 0, "not_measured": 1}, "unchecked_targets": ["e"],
              "assumptions": {"link.per_segment_us": words}}
    lines = document.summary_lines(report)
    assert "  e: short reason, kept whole" in lines
    start = lines.index(next(line for line in lines if line.startswith("  link.per_segment_us: ")))
    block = lines[start:]
    assert all(len(line) <= document.WRAP_COLUMNS for line in block) and len(block) > 1
    assert block[-1].endswith(" ...")  # cut, and said so
    text = " ".join(line.strip() for line in block).removeprefix("link.per_segment_us: ").removesuffix(" ...")
    assert all(w.startswith("word") and w[4:].isdigit() for w in text.split())  # no word cut in half
    assert words.startswith(text)
