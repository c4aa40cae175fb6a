"""`hicache conform`: junit.xml + summary.json, exit 0 on pass, 1 on a wrong byte, 3 (NOT RUN) on absent hardware or
skipped deciding suites, 2 on a bad argument or a busy/unusable --out; one folder per backend and profile identity."""

from __future__ import annotations

import fcntl
import json
import os
import textwrap
from pathlib import Path

import pytest

from conformance.cli.conform import default_out
from conformance.cli.main import main
from conformance.cli.out_folder import LOCK_NAME, MANIFEST_NAME, RESULTS, WORK_NAME
from conformance.common.errors import EXIT_PARTIAL
from conformance.report.summary import ModuleResult, Summary

SUBSET = "test_targets or (backup and mla-ps16-bf16-128) or (load and mha-ps1-fp32-1page)"

# Out-of-tree backends, registered at import as `--backend-module` expects: one flips the last
# byte each plan writes (after the copy, so only a bit-exact check can see it), one has no hardware.
BACKENDS_MODULE = textwrap.dedent('''
    import torch
    from hal.backend import Backend, register
    from hal.backends.emu import EmuBackend

    class OneBadByteBackend(EmuBackend):
        name = "one_bad_byte"

        def execute(self, plan, stream=None):
            event = super().execute(plan, stream)
            event.wait()
            group = plan.groups[0]
            last = int(group.segments.dst_offsets[-1] + group.segments.nbytes[-1] - 1)
            group.dst.view(torch.uint8).reshape(-1)[last] ^= 0x01
            return event

    class AbsentBackend(EmuBackend):
        name = "absent"

        @classmethod
        def probe(cls):
            return False, "no absent-accelerator in this machine"

    register("one_bad_byte", OneBadByteBackend)
    register("absent", AbsentBackend)
''')


@pytest.fixture
def backends_module(tmp_path, monkeypatch):
    (tmp_path / "conform_test_backends.py").write_text(BACKENDS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))  # for this process's argument check
    # for the pytest child: the module, and this checkout's conformance (not an installed copy)
    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), root, os.environ.get("PYTHONPATH")) if p))
    return "conform_test_backends"


def conform(out, *args) -> int:
    return main(["conform", "--out", str(out), "-n", "0", *args])


def summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def previous_report(out, **files) -> None:
    """OUT as a previous run left it: `files` (name -> text) and the manifest naming what it wrote."""
    out.mkdir(exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text)
    (out / MANIFEST_NAME).write_text(json.dumps({"written": sorted(RESULTS + (WORK_NAME,))}))


@pytest.mark.slow  # runs the command or pytest in a child process
def test_emu_subset_is_partial_not_pass_and_writes_reports(tmp_path, capfd):
    out = tmp_path / "report"
    # -k leaves most of the deciding suites out: nothing failed, but that is no sign-off
    assert conform(out, "--backend", "emu", "--profile", "emu", "-k", SUBSET) == EXIT_PARTIAL == 4
    assert (out / "junit.xml").stat().st_size > 0
    s = summary(out)
    assert s["totals"]["failed"] == 0 and s["totals"]["passed"] == s["totals"]["tests"] - 1 >= 8
    assert s["skip_reasons"] == {"profile emu has no readings": 1}  # test_reading, said once
    assert s["verdict"] == "PARTIAL" and s["ok"] is False and s["not_run_reason"] is None
    assert s["deselected"]["test_bad_input"] > 0 and s["deselected"]["test_layout_equivalence"] > 0
    assert "test_bad_input deselected" in s["partial_reason"]
    assert {m["module"] for m in s["modules"]} == {"test_layout_equivalence", "test_targets"}
    printed = capfd.readouterr().out
    assert "test_layout_equivalence" in printed and "PARTIAL: the deciding suites did not run in full" in printed
    assert "PASS" not in printed


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_full_run_passes_and_leaves_only_the_reports(tmp_path, capfd):
    out = tmp_path / "report"
    # every test of the deciding suites selected (-k drops only the SPMD processes): PASS, exit 0
    assert conform(out, "--backend", "emu", "--profile", "emu", "-k", "not test_spmd") == 0
    s = summary(out)
    assert s["verdict"] == "PASS" and s["ok"] and s["partial_reason"] is None
    assert s["deselected"] == {"test_spmd": s["deselected"]["test_spmd"]} and s["deselected"]["test_spmd"] > 0
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_NAME, "junit.xml", "report.html", "report.json",
                                                     "summary.json"]
    assert "PASS:" in capfd.readouterr().out


@pytest.mark.slow  # runs the command or pytest in a child process
def test_one_wrong_byte_fails_the_run(tmp_path, capfd, backends_module):
    out = tmp_path / "report"
    rc = conform(out, "--backend", "one_bad_byte", "--profile", "emu", "--backend-module", backends_module,
                 "-k", SUBSET)
    assert rc == 1
    s = summary(out)
    assert not s["ok"] and s["totals"]["failed"] >= 3  # every layout-equivalence case in the subset
    assert all("differ" in f["message"] for f in s["failures"])
    assert "FAIL:" in capfd.readouterr().out


@pytest.mark.slow  # runs the command or pytest in a child process
def test_absent_hardware_is_not_run_exit_3_and_not_ok(tmp_path, capfd, backends_module):
    out = tmp_path / "report"
    assert conform(out, "--backend", "absent", "--backend-module", backends_module, "-k", SUBSET) == 3
    s = summary(out)
    reasons = " ".join(s["skip_reasons"])
    assert s["totals"]["skipped"] >= 3 and "no absent-accelerator in this machine" in reasons
    assert s["totals"]["passed"] >= 1  # test_targets needs no backend: passes that must not sign off
    assert s["ok"] is False and s["verdict"] == "NOT RUN"
    assert "no absent-accelerator in this machine" in s["not_run_reason"]
    printed = capfd.readouterr().out
    assert "not available here" in printed and "NOT RUN: backend 'absent'" in printed and "PASS" not in printed


def test_a_deciding_suite_all_skipped_is_not_run():
    def summ(*modules):
        return Summary("emu", "emu", "junit.xml", list(modules))

    assert summ(ModuleResult("test_targets", passed=4), ModuleResult("test_bad_input", skipped=9)).verdict == "NOT RUN"
    assert summ(ModuleResult("test_targets", skipped=4)).verdict == "NOT RUN"
    assert summ().verdict == "NOT RUN" and not summ().ok
    both = (ModuleResult("test_bad_input", passed=1, skipped=8), ModuleResult("test_layout_equivalence", passed=2))
    assert summ(*both).verdict == "PASS"
    assert summ(ModuleResult("test_bad_input", passed=1, failed=1)).verdict == "FAIL"
    # only the targets ran and the deciding suites were never collected: NOT RUN
    only_targets = summ(ModuleResult("test_targets", passed=4))
    assert only_targets.verdict == "NOT RUN" and "no test of test_layout_equivalence" in only_targets.not_run_reason
    # ... but when -k deselected them, the run is PARTIAL (the user chose a subset; nothing is unavailable)
    chosen = Summary("emu", "emu", "j", [ModuleResult("test_targets", passed=4)],
                     deselected={"test_bad_input": 9, "test_layout_equivalence": 30})
    assert chosen.verdict == "PARTIAL" and "30 tests of test_layout_equivalence deselected" in chosen.partial_reason
    # -k matching nothing at all: NOT RUN, saying so
    none = Summary("emu", "emu", "j", [], deselected={"test_bad_input": 9, "test_targets": 16})
    assert none.verdict == "NOT RUN" and "matched none" in none.not_run_reason


def test_deciding_suites_run_in_part_are_partial_never_pass():
    both = [ModuleResult("test_bad_input", passed=3), ModuleResult("test_layout_equivalence", passed=5)]
    # one deciding suite missing altogether
    alone = Summary("emu", "emu", "j", both[:1])
    assert alone.verdict == "PARTIAL" and alone.partial_reason == "test_layout_equivalence did not run"
    # some deciding tests deselected (-k): PARTIAL, whatever passed; not ok
    cut = Summary("emu", "emu", "j", both, deselected={"test_layout_equivalence": 7, "test_spmd": 2})
    assert cut.verdict == "PARTIAL" and cut.partial_reason == "7 tests of test_layout_equivalence deselected"
    assert cut.to_json()["ok"] is False and cut.to_json()["partial_reason"] == cut.partial_reason
    # only non-deciding tests deselected: the deciding suites ran in full
    assert Summary("emu", "emu", "j", both, deselected={"test_spmd": 2}).verdict == "PASS"
    # a failure still fails
    bad = [ModuleResult("test_bad_input", failed=1), both[1]]
    assert Summary("emu", "emu", "j", bad, deselected={"test_bad_input": 9}).verdict == "FAIL"
    s = Summary("x", None, "j", [ModuleResult("test_bad_input", passed=3)], unavailable="no card")
    assert s.verdict == "NOT RUN" and s.to_json()["ok"] is False and "no card" in s.to_json()["not_run_reason"]


def test_an_error_fails_the_verdict_like_a_failure():
    """A test that errored (a fixture raised) checked nothing and hid whatever it would have found."""
    both = [ModuleResult("test_bad_input", passed=3), ModuleResult("test_layout_equivalence", passed=5)]
    assert Summary("emu", "emu", "j", both).verdict == "PASS"
    errored = [ModuleResult("test_bad_input", passed=3, errors=1), both[1]]
    s = Summary("emu", "emu", "j", errored)
    assert s.verdict == "FAIL" and not s.ok and s.to_json()["ok"] is False
    # an error outside the deciding suites fails the run too
    assert Summary("emu", "emu", "j", [*both, ModuleResult("test_spmd", errors=1)]).verdict == "FAIL"


def test_one_deciding_suite_all_skipped_beside_one_that_passed_is_not_run():
    # both deciding suites collected; every test of one was skipped: that suite checked nothing
    s = Summary("emu", "emu", "j", [ModuleResult("test_bad_input", passed=3),
                                    ModuleResult("test_layout_equivalence", skipped=30)])
    assert s.verdict == "NOT RUN" and s.not_run_reason == "every test of test_layout_equivalence was skipped"
    assert s.partial_reason is None and s.to_json()["ok"] is False
    # one test of it passed: it ran
    s = Summary("emu", "emu", "j", [ModuleResult("test_bad_input", passed=3),
                                    ModuleResult("test_layout_equivalence", passed=1, skipped=29)])
    assert s.verdict == "PASS"


SWALLOWING_PLUGIN = textwrap.dedent('''
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):  # a plugin that turns failed targets into passes
        report = (yield).get_result()
        if "test_target[" in item.nodeid and report.failed:
            report.outcome, report.longrepr = "passed", None
''')


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_failed_target_whose_test_passed_still_fails_the_run(tmp_path, capfd, backends_module):
    """The target rows decide: a plugin that hides the failed test cannot turn the verdict."""
    (tmp_path / "swallow_failures.py").write_text(SWALLOWING_PLUGIN)  # on the child's PYTHONPATH (fixture)
    text = (Path(__file__).resolve().parents[2] / "hardware_profiles" / "emu.yaml").read_text()
    text += ('  ghost_entry_bytes:\n    comparator: "<="\n    value: 1\n    tolerance: 0\n    unit: B\n'
             '    source: "test: no ghost list entry fits in one byte"\n')
    (tmp_path / "tight.yaml").write_text(text)
    out = tmp_path / "report"
    rc = conform(out, "--profile", str(tmp_path / "tight.yaml"), "-k", "test_target and ghost",
                 "--", "-p", "swallow_failures")
    s = summary(out)
    assert s["totals"]["failed"] == 0 and s["verdict"] == "PARTIAL"  # the junit record saw no failure
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "FAIL" and report["failed_targets"] == ["ghost_entry_bytes"]
    assert rc == 1


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_second_run_on_a_locked_out_is_refused_and_old_results_stay(tmp_path, capfd):
    out = tmp_path / "report"
    previous_report(out, **{"summary.json": '{"ok": true}'})
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    os.write(fd, b"4242\n")
    fcntl.flock(fd, fcntl.LOCK_EX)  # another run holds it
    try:
        assert conform(out, "-k", SUBSET) == 2
    finally:
        os.close(fd)
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hicache: --out: ") and "pid 4242" in err[0]
    assert (out / "summary.json").read_text() == '{"ok": true}'  # the other run's, untouched


def test_a_pytest_argument_pytest_refuses_is_bad_input_and_leaves_the_previous_report(tmp_path, capfd):
    out = tmp_path / "report"
    previous_report(out, **{"summary.json": '{"ok": true}', "junit.xml": "<testsuites/>"})
    # pytest's own parser refuses it before OUT is touched: nothing ran, nothing changed
    assert conform(out, "--", "--no-such-pytest-option") == 2
    assert (out / "summary.json").read_text() == '{"ok": true}' and (out / "junit.xml").exists()
    assert "--no-such-pytest-option" in capfd.readouterr().err


def test_default_folders_tell_same_stem_profiles_apart(tmp_path):
    a, b = tmp_path / "a" / "p800.yaml", tmp_path / "b" / "p800.yaml"
    assert default_out("emu", str(a)) != default_out("emu", str(b))
    assert default_out("emu", str(a)).name.startswith("hicache-conform-emu-p800-")
    assert default_out("emu", "p800").name == "hicache-conform-emu-p800"


@pytest.mark.slow  # runs the command or pytest in a child process
def test_out_that_is_a_file_is_refused(tmp_path, capfd):
    f = tmp_path / "taken"
    f.write_text("mine")
    assert conform(f) == 2
    err = capfd.readouterr().err.strip()
    assert err.startswith("hicache: --out: ") and err.endswith(": exists and is not a folder") and "\n" not in err
    assert f.read_text() == "mine"


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("args, named", [
    (["--backend", "no_such_backend"], "--backend"),
    (["--profile", "no_such_profile"], "no_such_profile"),
    (["--backend-module", "no_such_module_xyz"], "--backend-module"),
])
def test_bad_arguments_exit_2_with_a_message(tmp_path, capfd, args, named):
    assert conform(tmp_path / "report", *args) == 2
    assert named in capfd.readouterr().err
    assert not (tmp_path / "report" / "junit.xml").exists()


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_reused_out_says_the_report_is_replaced_and_keeps_only_the_reports(tmp_path, capfd):
    out = tmp_path / "report"
    out.mkdir()
    # what a previous run left: reports, its lock, its work folder (killed before it went)
    previous_report(out, **{name: "old" for name in RESULTS + (LOCK_NAME,)})
    (out / WORK_NAME).mkdir()
    (out / WORK_NAME / "pytest.ini").write_text("[pytest]\n")
    assert conform(out, "--backend", "emu", "--profile", "emu", "-k", SUBSET) == EXIT_PARTIAL
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [f"hicache: warning: --out {out}: replacing the previous report "
                   "(summary.json, report.json, report.html, junit.xml)"]
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_NAME, "junit.xml", "report.html", "report.json",
                                                     "summary.json"]
    assert summary(out)["verdict"] == "PARTIAL"
    # a fresh folder: no warning
    assert conform(tmp_path / "new", "--backend", "emu", "--profile", "emu", "-k", SUBSET) == EXIT_PARTIAL
    assert capfd.readouterr().err == ""


@pytest.mark.slow  # runs the command or pytest in a child process
def test_an_out_holding_other_files_is_refused_and_left_alone(tmp_path, capfd):
    out = tmp_path / "mine"
    previous_report(out, **{"summary.json": '{"ok": true}'})
    (out / "notes.txt").write_text("keep")
    assert conform(out, "-k", SUBSET) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: --out: {out}: holds 'notes.txt', which no hicache conform")
    # nothing touched, no lock
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_NAME, "notes.txt", "summary.json"]
    assert (out / "summary.json").read_text() == '{"ok": true}'
