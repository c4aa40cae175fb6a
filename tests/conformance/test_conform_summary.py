"""conformance.report.run_verdict read from a small hand-written junit: what conform's table, summary.json
and verdict are made of (per-module counts, skip and xfail reasons, failure messages)."""

from __future__ import annotations

import json

import pytest

from conformance.report.run_verdict import (
    format_table,
    is_reading_test,
    module_of,
    summarize_junit,
    write_json,
)

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


def _junit(tmp_path, *cases: str, name: str = "junit.xml"):
    """A junit file of these <testcase> elements (pytest's layout: one suite)."""
    path = tmp_path / name
    path.write_text('<?xml version="1.0" encoding="utf-8"?>\n<testsuites><testsuite name="pytest">\n'
                    + "\n".join(cases) + "\n</testsuite></testsuites>\n")
    return path


def _case(module: str, name: str, body: str = "") -> str:
    return f'<testcase classname="conformance.suites.{module}" name="{name}">{body}</testcase>'


PASSED_BOTH = (_case("test_layout_equivalence", "test_a"), _case("test_bad_input", "test_b"))


def test_repeated_outcomes_add_up_in_their_module_and_reason(tmp_path):
    path = _junit(tmp_path,
                  *(_case("test_bad_input", f"test_f{i}", f'<failure message="f{i}"/>') for i in range(2)),
                  *(_case("test_bad_input", f"test_e{i}", f'<error message="e{i}"/>') for i in range(3)),
                  *(_case("test_targets", f"test_x{i}", '<skipped type="pytest.xfail" message="gap"/>')
                    for i in range(2)),
                  _case("test_targets", "test_s", '<skipped type="pytest.skip">first line\nsecond</skipped>'),
                  '<testcase name="test_orphan"/>')  # no classname: its own module "?"
    s = summarize_junit(path, "emu", None)
    rows = {m.module: (m.passed, m.failed, m.errors, m.skipped, m.xfailed) for m in s.modules}
    assert rows == {"?": (1, 0, 0, 0, 0), "test_bad_input": (0, 2, 3, 0, 0), "test_targets": (0, 0, 0, 1, 2)}
    assert s.xfail_reasons == {"gap": 2}
    assert s.skip_reasons == {"first line": 1}  # no message: the first line of the text
    assert [f["message"] for f in s.failures] == ["f0", "f1", "e0", "e1", "e2"]


def test_the_backends_unavailability_and_the_deciding_suites_reach_the_verdict(tmp_path):
    path = _junit(tmp_path, *PASSED_BOTH)
    assert summarize_junit(path, "emu", "p800").verdict == "PASS"
    gone = summarize_junit(path, "xpu", "p800", unavailable="no card")
    assert gone.verdict == "NOT RUN" and gone.not_run_reason == "backend 'xpu' is not available here: no card"
    storage = summarize_junit(path, "emu", "p800", deciding=("test_storage",))
    assert storage.deciding == ("test_storage",) and storage.verdict == "NOT RUN"
    assert storage.not_run_reason == "no test of test_storage ran (not collected)"


def test_a_reading_is_the_last_part_of_a_test_id():
    assert is_reading_test("test_reading[ttft]") and is_reading_test("test_targets::test_reading[ttft]")
    assert is_reading_test("suites/test_targets.py::TestSeed::test_reading[ttft]")
    assert not is_reading_test("test_reading[ttft]::test_other")


def test_summary_json_holds_every_key_with_its_value(tmp_path):
    path = _junit(tmp_path, *PASSED_BOTH, _case("test_targets", "test_reading[ttft]", '<failure message="off"/>'),
                  _case("test_bad_input", "test_c", '<failure message="bytes differ"/>'))
    answer, counts = {"text": "yes", "gain_pct": 12.0}, {"reading_pass": 3, "reading_fail": 1}
    s = summarize_junit(path, "emu", "p800", deselected={"test_bad_input": 2})
    s.answer, s.target_counts = answer, counts
    assert s.partial_reason == "2 tests of test_bad_input deselected"  # but it failed: FAIL, not PARTIAL
    assert s.to_json() == {
        "backend": "emu", "profile": "p800", "junit": str(path), "ok": False, "verdict": "FAIL",
        "not_run_reason": None, "partial_reason": None, "deselected": {"test_bad_input": 2},
        "totals": {"tests": 4, "passed": 2, "failed": 2, "errors": 0, "skipped": 0, "xfailed": 0},
        "modules": [{"module": "test_bad_input", "passed": 1, "failed": 1, "errors": 0, "skipped": 0, "xfailed": 0,
                     "tests": 2},
                    {"module": "test_layout_equivalence", "passed": 1, "failed": 0, "errors": 0, "skipped": 0,
                     "xfailed": 0, "tests": 1},
                    {"module": "test_targets", "passed": 0, "failed": 1, "errors": 0, "skipped": 0, "xfailed": 0,
                     "tests": 1}],
        "skip_reasons": {}, "xfail_reasons": {},
        "failures": [{"test": "test_targets::test_reading[ttft]", "message": "off"},
                     {"test": "test_bad_input::test_c", "message": "bytes differ"}],
        "answer": answer, "target_counts": counts, "model_verdict": "FAIL"}
    out = tmp_path / "summary.json"
    write_json(s, out)
    text = out.read_text()
    assert text == json.dumps(s.to_json(), indent=2) + "\n"  # indented for a person, one newline at the end
    assert text.startswith('{\n  "backend": "emu",\n')


def test_the_whole_table_with_the_answer_the_node_and_the_models_verdicts(tmp_path):
    path = _junit(tmp_path, *PASSED_BOTH,
                  _case("test_targets", "test_reading[ttft]", '<failure message="ttft 2.1 s, target 1.8"/>'),
                  _case("test_targets", "test_s", '<skipped message="no L3 here"/>'),
                  _case("test_targets", "test_x", '<skipped type="pytest.xfail" message="known gap"/>'))
    s = summarize_junit(path, "emu", None)
    s.answer = {"text": "yes: HiCache saves 12% of busy seconds"}
    # the model line counts the report's rows (here one more miss than the junit shows), not the failures
    s.target_counts = {"reading_pass": 3, "reading_fail": 2, "reading_not_measured": 2}
    head = "module                     tests   passed   failed   errors  skipped  xfailed    model"
    assert format_table(s) == "\n".join([
        "hicache conform: backend emu, profile none",
        "answer: yes: HiCache saves 12% of busy seconds",
        head,
        "-" * len(head),
        "test_bad_input                 1        1        0        0        0        0        0",
        "test_layout_equivalence        1        1        0        0        0        0        0",
        "test_targets                   3        0        0        0        1        1        1",
        "-" * len(head),
        "total                          5        2        0        0        1        1        1",
        # a seed reading the model misses is the model's section, not a failed check of the node
        "the model: 1 seed readings outside tolerance (the model's verdict, not a failed check of the node):",
        "  test_reading[ttft]: ttft 2.1 s, target 1.8",
        "skipped:",
        "      1 x no L3 here",
        "expected failures:",
        "      1 x known gap",
        # a seed reading the model misses is the model's verdict, not the node's
        "PASS: 2 passed, 0 failed, 1 seed readings outside tolerance, 1 skipped of 5",
        "model FAIL: 3 of the profile's seed readings within tolerance, 2 outside, 2 not measured (modeled on the "
        "seed scenario; the verdict above is the node's)"])
    s.target_counts = None  # the counts come from the failures alone
    assert format_table(s).splitlines()[-1] == (
        "model FAIL: 0 of the profile's seed readings within tolerance, 1 outside, 0 not measured (modeled on the "
        "seed scenario; the verdict above is the node's)")


def test_the_table_says_why_a_run_is_not_run_or_partial(tmp_path):
    path = _junit(tmp_path, *PASSED_BOTH)
    gone = format_table(summarize_junit(path, "xpu", "p800", unavailable="no card"))
    assert gone.splitlines()[-1] == "NOT RUN: backend 'xpu' is not available here: no card (2 passed, 0 failed, " \
                                    "0 skipped of 2)"
    cut = format_table(summarize_junit(path, "emu", "p800", deselected={"test_bad_input": 1}))
    assert cut.splitlines()[-1] == ("PARTIAL: the deciding suites did not run in full (1 test of test_bad_input "
                                    "deselected); no check of the node failed, but nothing is signed off (2 passed, "
                                    "0 failed, 0 skipped of 2)")
    assert "model" not in cut  # no readings: no model verdict


def test_the_table_lists_twenty_failures_cut_to_300_characters(tmp_path):
    def failing(n):
        return _junit(tmp_path, *(_case("test_bad_input", f"test_{i:02}", f'<failure message="{i:02}{"x" * 400}"/>')
                                  for i in range(n)), name=f"junit{n}.xml")

    twenty = format_table(summarize_junit(failing(20), "emu", "p800")).splitlines()
    shown = [ln for ln in twenty if ln.startswith("  test_bad_input::")]
    assert len(shown) == 20 and not any(ln.startswith("  ...") for ln in twenty)
    assert shown[0] == "  test_bad_input::test_00: 00" + "x" * 298  # the message cut to 300 characters
    more = format_table(summarize_junit(failing(21), "emu", "p800")).splitlines()
    assert sum(ln.startswith("  test_bad_input::") for ln in more) == 20
    assert f"  ... and 1 more in {tmp_path / 'junit21.xml'}" in more


@pytest.mark.slow  # runs the command or pytest in a child process
def test_pytests_console_shows_a_missed_reading_as_the_models_not_as_a_failure(tmp_path):
    """What conform's child prints: a seed reading outside tolerance is the model's section (its
    junit record stays a failure, which the summary counts as the model's verdict)."""
    import subprocess
    import sys

    (tmp_path / "test_targets.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('name', ['ttft', 'hits'])\n"
        "def test_reading(name):\n"
        "    assert name == 'hits', f'reading {name}: model 2.1 s vs seed 1.8 s: outside the tolerance'\n\n"
        "def test_other():\n"
        "    assert False, 'a real failure'\n", encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conformance.plugin", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "--junitxml", str(tmp_path / "junit.xml"), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "the model: 1 seed readings outside tolerance" in out
    assert "test_reading[ttft]: reading ttft: model 2.1 s vs seed 1.8 s: outside the tolerance" in out
    assert "1 failed" in out and "1 modeled readings outside tolerance" in out  # the real failure alone
    assert "_ test_other _" in out and "_ test_reading[ttft] _" not in out  # FAILURES: the real one only
    assert len(summarize_junit(tmp_path / "junit.xml", "emu", None).reading_failures) == 1


def test_a_nameless_junit_entry_is_no_test_and_a_short_report_says_what_never_ran(tmp_path):
    """xdist writes `<testcase time=.../>` with no name when its scheduler fails on a dead worker: it
    is no test, never a pass; and a report with fewer results than the selection kept says how many
    never ran, beside the FAIL (xdist stops after too many workers die)."""
    from conformance.report import selection

    path = tmp_path / "junit.xml"
    path.write_text(JUNIT.replace("</testsuite>", '<testcase time="0.5"/><testcase classname="" time="0.1"/></testsuite>'))
    s = summarize_junit(path, "emu", "p800")
    assert (s.tests, s.total("passed")) == (8, 2) and "?" not in [m.module for m in s.modules]
    counts = tmp_path / "selection.json"
    assert selection.unreported(counts, s.tests) is None  # no count written: nothing to say
    counts.write_text(json.dumps({"deselected": {}, "selected": 8}))
    assert selection.unreported(counts, s.tests) is None
    counts.write_text(json.dumps({"deselected": {}, "selected": 1400}))
    s.stopped = selection.unreported(counts, s.tests)
    assert s.stopped == "1392 of 1400 selected tests left no result: pytest stopped before they ran"
    assert s.verdict == "FAIL" and format_table(s).splitlines()[-1].endswith("; " + s.stopped)


def test_a_test_whose_worker_died_is_a_failure_saying_so_not_a_setup_error(tmp_path):
    """xdist files a test whose worker process died under it as an error 'failed on setup'; the test
    was running and did not pass: it is counted failed, its line says the worker died, and the
    record carries worker_died for conform's memory line."""
    from conformance.cli.pytest_child import crashed_workers_line

    crash = ('<testcase classname="test_crashing" name="test_x[16-mha]" time="0.1"><error message="failed '
             'on setup with &quot;worker \'gw0\' crashed while running \'test_layout_equivalence.py::test_x[16-mha]\''
             '&quot;">crash</error></testcase>')
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT.replace("</testsuite>", crash + "</testsuite>"))
    s = summarize_junit(path, "emu", "p800")
    died = [f for f in s.failures if f.get("worker_died")]
    assert len(died) == 1 and died[0]["message"].startswith("its pytest worker gw0 died while running it")
    module = next(m for m in s.modules if m.module == "test_crashing")
    assert (module.failed, module.errors) == (1, 0) and s.verdict == "FAIL"
    assert "1 test(s) failed because their pytest worker died" in crashed_workers_line(s.failures)
    assert crashed_workers_line([f for f in s.failures if not f.get("worker_died")]) is None
