"""`hicache conform` against a hostile user (issue 41): a test whose body never ran is not a pass,
pytest options it would refuse are refused before OUT is made, "no tests collected" means what it
says, and its children (xdist workers included) die with it on SIGKILL and SIGHUP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli.conform import pytest_command
from conformance.cli.conform_args import selected_nothing
from conformance.cli.main import main
from conformance.report.summary import BODY_NOT_RUN, summarize_junit
from tests.cli.test_cli_signals import descendants, start
from tests.proc_state import alive

REPO = Path(__file__).resolve().parents[2]

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2">
<testcase classname="conformance.suites.test_layout_equivalence" name="test_a">{props}</testcase>
<testcase classname="conformance.suites.test_layout_equivalence" name="test_b">{props}</testcase>
</testsuite></testsuites>"""


pytestmark = pytest.mark.slow  # hicache conform runs pytest in a child process


def test_a_test_whose_body_never_ran_is_not_run_never_passed(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT.format(props=f'<properties><property name="{BODY_NOT_RUN}" value="1"/></properties>'))
    s = summarize_junit(junit, "emu", "emu", deciding=("test_layout_equivalence",))
    assert s.total("passed") == 0 and s.verdict == "NOT RUN", s.to_json()
    junit.write_text(JUNIT.format(props=""))
    assert summarize_junit(junit, "emu", "emu", deciding=("test_layout_equivalence",)).verdict == "PASS"


@pytest.mark.parametrize("flag", ["--setup-only", "--setup-plan"])
def test_the_plugin_marks_tests_pytest_only_set_up(tmp_path, flag):
    (tmp_path / "test_x.py").write_text("def test_a(tmp_path):\n    assert False\n\ndef test_b():\n    pass\n")
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conformance.plugin", "-p", "no:cacheprovider",
                    flag, f"--junitxml={junit}", "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path / "test_x.py")],
                   cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, check=False)
    s = summarize_junit(junit, "emu", "emu", deciding=("test_x",))
    assert s.total("passed") == 0 and s.total("skipped") == 2 and s.verdict == "NOT RUN", s.to_json()


@pytest.mark.parametrize("args,named", [
    (["--setup-only"], "--setup-only"), (["--setup-plan"], "--setup-plan"), (["--co"], "--collect-only"),
    (["--collect-only"], "--collect-only"), (["--fixtures"], "--fixtures"), (["--markers"], "--markers"),
    (["--no-such-option"], "--no-such-option"), (["--dist", "bogus"], "--dist"),
])
def test_pytest_options_that_run_no_body_or_do_not_parse_are_refused_before_out(tmp_path, capsys, args, named):
    out = tmp_path / "o"
    assert main(["conform", "--backend", "emu", "--profile", "emu", "-n", "2", "--out", str(out), "--", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err
    assert not out.exists()


def test_no_test_collected_is_exit_5_only_for_a_selection():
    assert selected_nothing("x", []) and selected_nothing(None, ["-m", "slow"])
    assert selected_nothing(None, ["-kfoo"]) and selected_nothing(None, ["--deselect=a::b"])
    assert not selected_nothing(None, []) and not selected_nothing(None, ["-x", "--maxfail=2"])


def test_pytest_tmp_folders_go_under_the_work_folder_not_tmpdir(tmp_path):
    class A:
        backend, engine, backend_module, keyword, exitfirst, workers, pytest_args = "emu", "reference", [], None, False, "0", []
    cmd = pytest_command(A, "emu", tmp_path, tmp_path / "work")
    assert cmd[cmd.index("--basetemp") + 1] == str(tmp_path / "work" / "tmp")


def _wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(what)


@pytest.mark.slow
def test_sigkill_of_conform_takes_the_xdist_workers_down(tmp_path):
    proc = start(["conform", "--backend", "emu", "--profile", "emu", "-n", "2", "--out", str(tmp_path / "o"),
                  "-k", "test_layout_equivalence"], tmp_path)
    kids = _wait_for(lambda: d if len(d := descendants(proc.pid)) >= 3 else None, 90, "no xdist workers")
    time.sleep(3)  # the workers have imported the plugin and asked for their parent-death signal
    kids = descendants(proc.pid) | kids
    proc.kill()
    proc.communicate(timeout=30)
    _wait_for(lambda: not any(alive(k) for k in kids), 5.0, f"left running: {[k for k in kids if alive(k)]}")


@pytest.mark.slow
def test_xdist_workers_in_a_long_test_die_with_their_pytest_parent(tmp_path):
    body = ("import os, time\n\ndef _mark(name):\n    open(os.path.join({d!r}, name), 'w').close()\n    "
            "time.sleep(120)\n\ndef test_a():\n    _mark('a')\n\ndef test_b():\n    _mark('b')\n")
    (tmp_path / "test_long.py").write_text(body.format(d=str(tmp_path)))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "conformance.plugin", "-p", "no:cacheprovider",
                             "-n", "2", "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path / "test_long.py")],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # both workers are inside a test body (their plugin configured long before)
        _wait_for(lambda: (tmp_path / "a").exists() and (tmp_path / "b").exists(), 180, "the tests never started")
        kids = descendants(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    _wait_for(lambda: not any(alive(k) for k in kids), 3.0, f"left running: {[k for k in kids if alive(k)]}")


@pytest.mark.slow
def test_sighup_is_one_line_exit_129_no_child_left_and_tmpdir_as_found(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env_tmp = {"TMPDIR": str(tmpdir)}
    os.environ.update(env_tmp)
    try:
        proc = start(["conform", "--backend", "emu", "--profile", "emu", "-n", "0", "--out", str(tmp_path / "o"),
                      "-k", "test_layout_equivalence"], tmp_path)
    finally:
        os.environ.pop("TMPDIR")
    kids = _wait_for(lambda: descendants(proc.pid), 60, "no pytest child")
    time.sleep(4)
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 129, (proc.returncode, err)
    assert err.strip().splitlines()[-1] == "hicache: hung up (SIGHUP)" and "Traceback" not in err, err
    assert not any(alive(k) for k in kids)
    assert not list(tmpdir.glob("pytest-of-*")), list(tmpdir.iterdir())
