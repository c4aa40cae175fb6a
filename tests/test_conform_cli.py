"""`hicache conform`: junit.xml + summary.json, exit 0 on pass, 1 on a wrong byte, 3 (NOT RUN) on absent hardware or
skipped deciding suites, 2 on a bad argument or a busy/unusable --out; one folder per backend and profile identity."""

from __future__ import annotations

import fcntl
import json
import os
import textwrap

import pytest

from conformance.cli.conform import LOCK_NAME, default_out
from conformance.cli.main import main
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
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # for the pytest child
    return "conform_test_backends"


def conform(out, *args) -> int:
    return main(["conform", "--out", str(out), "-n", "0", *args])


def summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_emu_subset_passes_and_writes_reports(tmp_path, capfd):
    out = tmp_path / "report"
    assert conform(out, "--backend", "emu", "--profile", "emu", "-k", SUBSET) == 0
    assert (out / "junit.xml").stat().st_size > 0
    s = summary(out)
    assert s["ok"] and s["totals"]["failed"] == 0 and s["totals"]["passed"] == s["totals"]["tests"] >= 8
    assert {m["module"] for m in s["modules"]} == {"test_layout_equivalence", "test_targets"}
    printed = capfd.readouterr().out
    assert "test_layout_equivalence" in printed and "PASS:" in printed


def test_one_wrong_byte_fails_the_run(tmp_path, capfd, backends_module):
    out = tmp_path / "report"
    rc = conform(out, "--backend", "one_bad_byte", "--profile", "emu", "--backend-module", backends_module,
                 "-k", SUBSET)
    assert rc == 1
    s = summary(out)
    assert not s["ok"] and s["totals"]["failed"] >= 3  # every layout-equivalence case in the subset
    assert all("differ" in f["message"] for f in s["failures"])
    assert "FAIL:" in capfd.readouterr().out


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
    assert summ(ModuleResult("test_bad_input", passed=1, skipped=8)).verdict == "PASS"
    assert summ(ModuleResult("test_bad_input", passed=1, failed=1)).verdict == "FAIL"
    s = Summary("x", None, "j", [ModuleResult("test_bad_input", passed=3)], unavailable="no card")
    assert s.verdict == "NOT RUN" and s.to_json()["ok"] is False and "no card" in s.to_json()["not_run_reason"]


def test_a_second_run_on_a_locked_out_is_refused_and_old_results_stay(tmp_path, capfd):
    out = tmp_path / "report"
    out.mkdir()
    (out / "summary.json").write_text('{"ok": true}')
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


def test_a_failed_start_leaves_no_stale_verdict(tmp_path, capfd):
    out = tmp_path / "report"
    out.mkdir()
    (out / "summary.json").write_text('{"ok": true}')
    (out / "junit.xml").write_text("<testsuites/>")
    # pytest stops at once (a usage error in its own arguments): no report from this run.
    assert conform(out, "--", "--no-such-pytest-option") != 0
    assert not (out / "summary.json").exists() and not (out / "junit.xml").exists()
    assert "pytest wrote no report" in capfd.readouterr().err


def test_default_folders_tell_same_stem_profiles_apart(tmp_path):
    a, b = tmp_path / "a" / "p800.yaml", tmp_path / "b" / "p800.yaml"
    assert default_out("emu", str(a)) != default_out("emu", str(b))
    assert default_out("emu", str(a)).name.startswith("hicache-conform-emu-p800-")
    assert default_out("emu", "p800").name == "hicache-conform-emu-p800"


def test_out_that_is_a_file_is_refused(tmp_path, capfd):
    f = tmp_path / "taken"
    f.write_text("mine")
    assert conform(f) == 2
    err = capfd.readouterr().err.strip()
    assert err.startswith("hicache: --out: ") and err.endswith(": exists and is not a folder") and "\n" not in err
    assert f.read_text() == "mine"


@pytest.mark.parametrize("args, named", [
    (["--backend", "no_such_backend"], "--backend"),
    (["--profile", "no_such_profile"], "no_such_profile"),
    (["--backend-module", "no_such_module_xyz"], "--backend-module"),
])
def test_bad_arguments_exit_2_with_a_message(tmp_path, capfd, args, named):
    assert conform(tmp_path / "report", *args) == 2
    assert named in capfd.readouterr().err
    assert not (tmp_path / "report" / "junit.xml").exists()
