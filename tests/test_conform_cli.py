"""`hicache conform`: junit.xml + summary.json, exit 0 on pass or absent hardware, non-zero on a wrong byte or bad argument."""

from __future__ import annotations

import json
import textwrap

import pytest

from conformance.cli.main import main

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


def test_absent_hardware_skips_with_its_reason_and_exits_0(tmp_path, capfd, backends_module):
    out = tmp_path / "report"
    assert conform(out, "--backend", "absent", "--backend-module", backends_module, "-k", SUBSET) == 0
    s = summary(out)
    reasons = " ".join(s["skip_reasons"])
    assert s["totals"]["skipped"] >= 3 and "no absent-accelerator in this machine" in reasons
    assert "not available here" in capfd.readouterr().out


@pytest.mark.parametrize("args, named", [
    (["--backend", "no_such_backend"], "--backend"),
    (["--profile", "no_such_profile"], "no_such_profile"),
    (["--backend-module", "no_such_module_xyz"], "--backend-module"),
])
def test_bad_arguments_exit_2_with_a_message(tmp_path, capfd, args, named):
    assert conform(tmp_path / "report", *args) == 2
    assert named in capfd.readouterr().err
    assert not (tmp_path / "report" / "junit.xml").exists()
