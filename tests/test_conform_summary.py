"""conformance.report.summary read from a small hand-written junit: what conform's table, summary.json
and verdict are made of (per-module counts, skip and xfail reasons, failure messages)."""

from __future__ import annotations

import json

from conformance.report.summary import format_table, is_reading_test, module_of, summarize_junit, write_json

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
 <testcase classname="conformance.suites.test_layout_equivalence" name="test_a"/>
 <testcase classname="conformance.suites.test_layout_equivalence" name="test_b"/>
 <testcase classname="conformance.suites.test_layout_equivalence.TestX" name="test_c">
  <failure message="bytes differ">long text</failure></testcase>
 <testcase classname="conformance.suites.test_bad_input" name="test_d">
  <error>boom in setup
second line</error></testcase>
 <testcase classname="conformance.suites.test_bad_input" name="test_e">
  <skipped type="pytest.skip" message="no device here"/></testcase>
 <testcase classname="conformance.suites.test_bad_input" name="test_f">
  <skipped type="pytest.skip" message="no device here"/></testcase>
 <testcase classname="conformance.suites.test_targets" name="test_reading[hit]">
  <skipped type="pytest.xfail" message="known gap"/></testcase>
 <testcase classname="conformance.suites.test_targets" name="test_g">
  <skipped type="pytest.skip"></skipped></testcase>
</testsuite></testsuites>
"""


def _summary(tmp_path, **kw):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    return summarize_junit(path, "emu", "p800", **kw), path


def test_each_outcome_is_counted_in_its_module_with_its_reason(tmp_path):
    s, path = _summary(tmp_path)
    rows = {m.module: (m.passed, m.failed, m.errors, m.skipped, m.xfailed, m.tests) for m in s.modules}
    assert rows == {"test_bad_input": (0, 0, 1, 2, 0, 3), "test_layout_equivalence": (2, 1, 0, 0, 0, 3),
                    "test_targets": (0, 0, 0, 1, 1, 2)}
    assert [m.module for m in s.modules] == sorted(rows)  # the table's order
    assert s.skip_reasons == {"no device here": 2, "no reason given": 1}  # most common first
    assert s.xfail_reasons == {"known gap": 1}
    assert s.failures == [{"test": "test_layout_equivalence::test_c", "message": "bytes differ"},
                          {"test": "test_bad_input::test_d", "message": "boom in setup"}]  # no message: first line
    assert s.verdict == "FAIL" and not s.ok and s.junit == str(path)


def test_summary_json_says_what_the_junit_holds(tmp_path):
    s, _ = _summary(tmp_path, deselected={"test_targets": 3})
    j = s.to_json()
    assert (j["backend"], j["profile"], j["ok"], j["verdict"]) == ("emu", "p800", False, "FAIL")
    assert j["totals"] == {"tests": 8, "passed": 2, "failed": 1, "errors": 1, "skipped": 3, "xfailed": 1}
    assert j["modules"][1] == {"module": "test_layout_equivalence", "passed": 2, "failed": 1, "errors": 0,
                               "skipped": 0, "xfailed": 0, "tests": 3}
    assert j["skip_reasons"] == s.skip_reasons and j["xfail_reasons"] == s.xfail_reasons
    assert j["failures"] == s.failures and j["deselected"] == {"test_targets": 3}
    assert j["not_run_reason"] is None and j["partial_reason"] is None  # FAIL: neither applies
    out = tmp_path / "summary.json"
    write_json(s, out)
    assert json.loads(out.read_text()) == j


def test_the_table_lists_modules_reasons_failures_and_the_verdict_line(tmp_path):
    s, path = _summary(tmp_path)
    lines = format_table(s, max_failures=1).splitlines()
    assert lines[0] == "hicache conform: backend emu, profile p800"
    row = next(ln for ln in lines if ln.startswith("test_layout_equivalence"))
    assert row.split() == ["test_layout_equivalence", "3", "2", "1", "0", "0", "0"]
    total = next(ln for ln in lines if ln.startswith("total"))
    assert total.split() == ["total", "8", "2", "1", "1", "3", "1"]
    assert "      2 x no device here" in lines and "      1 x known gap" in lines
    assert "failed (2):" in lines and "  test_layout_equivalence::test_c: bytes differ" in lines
    assert f"  ... and 1 more in {path}" in lines  # cut at max_failures, pointing at the junit
    assert lines[-1] == "FAIL: 2 passed, 2 failed, 3 skipped of 8"  # errors count as failed


def test_module_and_reading_names():
    assert module_of("conformance.suites.test_targets") == "test_targets"
    assert module_of("conformance.test_x.TestY") == "test_x"
    assert module_of("plain") == "plain" and module_of("") == "?"
    assert is_reading_test("test_targets::test_reading[hit]") and not is_reading_test("test_targets::test_readings")
