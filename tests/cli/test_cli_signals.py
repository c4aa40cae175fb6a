"""Signals mid-run: Ctrl-C (SIGINT) ends `hicache replay` and `hicache conform` with one line and exit
130; SIGKILL of the `hicache` parent takes conform's pytest child (and its workers) down with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.proc_state import alive

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.slow  # real hicache processes signalled mid-run


def _as_in_a_terminal() -> None:
    # A shell starts background jobs (`pytest ... &`) with SIGINT ignored, and Python then installs
    # no KeyboardInterrupt handler: give the command the disposition a terminal's Ctrl-C meets.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("HICACHE_TRACEBACK", None)
    return subprocess.Popen([sys.executable, "-m", "conformance.cli.main", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_in_a_terminal)


def descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in os.listdir(f"/proc/{p}/task") if os.path.isdir(f"/proc/{p}/task") else ():
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = {int(k) for k in f.read().split()}
            except OSError:
                continue
            todo.extend(kids - found)
            found |= kids
    return found


def wait_for_children(proc: subprocess.Popen, timeout: float = 60) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = descendants(proc.pid)
        if kids:
            return kids
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("conform started no pytest child")


def wait_for_replay_threads(proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until the controller's transfer threads (and torch's) run: the replay has begun."""
    deadline = time.monotonic() + timeout
    while len(os.listdir(f"/proc/{proc.pid}/task")) < 4:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.5)


def assert_interrupted(proc: subprocess.Popen, warnings: tuple[str, ...] = ()) -> None:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == len(warnings) + 1 and lines[-1] == "hicache: interrupted", err
    assert all(line.startswith(w) for line, w in zip(lines[:-1], warnings, strict=True)), err
    assert "Traceback" not in out + err and "Pluggy" not in out + err


@pytest.fixture
def long_trace(tmp_path) -> Path:
    """Requests whose materialized replay takes tens of seconds: long enough to interrupt."""
    path = tmp_path / "long.jsonl"
    with path.open("w") as f:
        for i in range(400):
            blocks = 8 + i % 32
            ids = list(range(blocks)) if i % 2 else list(range(1000 * i, 1000 * i + blocks))
            f.write(json.dumps({"timestamp": i, "input_length": 512 * blocks, "hash_ids": ids}) + "\n")
    return path


@pytest.mark.slow  # runs the command or pytest in a child process
def test_ctrl_c_mid_replay_is_one_line_and_exit_130(tmp_path, long_trace):
    proc = start(["replay", "--trace", str(long_trace), "--materialize", "--layers", "4", "--kv-dim", "64",
                  "--l1-tokens", "1M", "--l2-tokens", "2M"], tmp_path)
    wait_for_replay_threads(proc)  # past the imports, inside the replay
    proc.send_signal(signal.SIGINT)
    assert_interrupted(proc)
    assert not any(n.startswith(f"hicache-kv-{proc.pid}-") for n in os.listdir("/dev/shm"))


@pytest.mark.slow  # runs the command or pytest in a child process
def test_sigkill_mid_replay_leaves_no_shared_files(tmp_path, long_trace):
    proc = start(["replay", "--trace", str(long_trace), "--materialize", "--layers", "4", "--kv-dim", "64"], tmp_path)
    wait_for_replay_threads(proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert not any(n.startswith(f"hicache-kv-{proc.pid}-") for n in os.listdir("/dev/shm"))
    assert list(tmp_path.glob("hicache*")) == []


CONFORM = ["conform", "--backend", "emu", "--profile", "emu", "-n", "0", "-k", "test_layout_equivalence"]


@pytest.mark.slow  # runs the command or pytest in a child process
def test_ctrl_c_mid_conform_stops_pytest_and_leaves_no_verdict(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "summary.json").write_text('{"ok": true}')  # a previous run's, named in its manifest
    (out / ".hicache-manifest.json").write_text('{"written": ["summary.json"]}')
    proc = start([*CONFORM, "--out", str(out)], tmp_path)
    kids = wait_for_children(proc)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    assert_interrupted(proc, (f"hicache: warning: --out {out}: replacing the previous report",))
    assert not any(alive(k) for k in kids)
    assert not (out / "summary.json").exists() and not (out / "junit.xml").exists()
    assert [p.name for p in out.iterdir()] == [".hicache-manifest.json"]  # no lock, ini or work folder left


@pytest.mark.slow  # runs the command or pytest in a child process
def test_sigkill_of_the_parent_takes_the_pytest_child_down(tmp_path):
    proc = start([*CONFORM, "--out", str(tmp_path / "report")], tmp_path)
    kids = wait_for_children(proc)
    time.sleep(2)  # pytest is collecting or running tests by now
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 5
    while any(alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(k) for k in kids), [k for k in kids if alive(k)]
