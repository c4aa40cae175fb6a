"""Every `hicache` command refuses bad input the same way: one stderr line `hicache: <option or
file>: <what>`, exit 2, no traceback, nothing left behind (files in the working folder or the
temp folder, /dev/shm shared buffers, child processes).

Each case of the table runs in a process of its own: forked from this (already imported) test
process, so 30 cases cost tenths of a second each instead of a torch import each, and once per
command as a real `python -m conformance.cli.main` subprocess of this checkout (PYTHONPATH at the
repo root), which also covers the interpreter's own entry and exit.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
import traceback
import uuid
from pathlib import Path

import pytest

from conformance.common import inputs
from conformance.common.errors import CliError, clip

REPO = Path(__file__).resolve().parents[2]
REQUEST = '{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1]}\n'
SMALL_PLAN = ["plan", "--host-layout", "layer_first", "--attention", "mla", "--layers", "2"]
BUDGET = "HICACHE_MEMORY_BUDGET"


def files(tmp: Path) -> dict[str, Path]:
    """The inputs the table names by key: a folder, a text trace, a gzip and a binary trace, ..."""
    (tmp / "folder").mkdir(parents=True)
    (tmp / "trace.jsonl").write_text(REQUEST * 3)
    (tmp / "empty.jsonl").write_text("")
    # gzip is read when the name says .gz; the same bytes under a .jsonl name, or a torn .gz, are refused
    (tmp / "gzipped.jsonl").write_bytes(gzip.compress(REQUEST.encode()))
    (tmp / "torn.jsonl.gz").write_bytes(gzip.compress((REQUEST * 50).encode())[:40])
    (tmp / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    (tmp / "long.yaml").write_text("x: " + "y" * 5000 + "\n")
    (tmp / "taken").write_text("a file, not a folder")
    return {k: tmp / k for k in ("folder", "trace.jsonl", "empty.jsonl", "gzipped.jsonl", "torn.jsonl.gz", "binary.jsonl",
                                 "long.yaml", "taken")}


# (id, argv with {file} placeholders, exit code, text the one line must contain)
CASES = [
    ("plan-tokens-negative", [*SMALL_PLAN, "--kv-dim", "8", "--tokens", "-1"], 2, "--tokens"),
    ("plan-tokens-huge", [*SMALL_PLAN, "--kv-dim", "8", "--tokens", "1T"], 2, "--tokens: needs ~"),
    ("plan-tokens-1e12", [*SMALL_PLAN, "--kv-dim", "8", "--tokens", "1000000000000"], 2, "--tokens: needs ~"),
    ("plan-kv-dim-0", [*SMALL_PLAN, "--kv-dim", "0", "--tokens", "64"], 2, "--kv-dim: must be positive"),
    ("plan-page-size-huge", [*SMALL_PLAN, "--kv-dim", "8", "--tokens", "64", "--page-size", "99999999999"],
     2, "--page-size"),
    ("plan-heads-with-mla", [*SMALL_PLAN, "--kv-dim", "8", "--tokens", "64", "--heads", "8"], 2, "--heads"),
    ("replay-trace-folder", ["replay", "--trace", "{folder}"], 2, "--trace: {folder}: is a directory"),
    ("replay-trace-gzip", ["replay", "--trace", "{gzipped.jsonl}"], 2, "gzip-compressed"),
    ("replay-trace-torn-gz", ["replay", "--trace", "{torn.jsonl.gz}"], 2, "is not a readable gzip file"),
    ("replay-trace-binary", ["replay", "--trace", "{binary.jsonl}"], 2, "--trace: {binary.jsonl}: is binary"),
    ("replay-profile-folder", ["replay", "--trace", "{trace.jsonl}", "--profile", "{folder}"], 2, "--profile"),
    ("replay-profile-long", ["replay", "--trace", "{trace.jsonl}", "--profile", "{long.yaml}"], 2,
     "--profile: {long.yaml}"),
    ("replay-profile-passwd", ["replay", "--trace", "{trace.jsonl}", "--profile", "/etc/passwd"], 2,
     "--profile: /etc/passwd"),
    ("replay-layers-huge", ["replay", "--trace", "{trace.jsonl}", "--layers", "100000000"], 2, "--layers"),
    ("replay-kv-dim-0", ["replay", "--trace", "{trace.jsonl}", "--kv-dim", "0"], 2, "--kv-dim"),
    ("replay-l1-100T", ["replay", "--trace", "{trace.jsonl}", "--l1-tokens", "100T"], 2, "--l1-tokens: needs ~"),
    ("replay-l2-one-token", ["replay", "--trace", "{trace.jsonl}", "--l2-tokens", "1"], 2, "--l2-tokens"),
    ("replay-l1-one-token", ["replay", "--trace", "{trace.jsonl}", "--l1-tokens", "1"], 2, "--l1-tokens"),
    ("replay-ghost-entries-alone", ["replay", "--trace", "{trace.jsonl}", "--ghost-entries", "32K"], 2,
     "--ghost-entries"),
    ("conform-out-file", ["conform", "--out", "{taken}"], 2, "--out: {taken}: exists and is not a folder"),
    ("conform-profile-folder", ["conform", "--profile", "{folder}"], 2, "--profile"),
    ("conform-bad-workers", ["conform", "-n", "many"], 2, "--workers"),
    ("doctor-profile-folder", ["doctor", "--profile", "{folder}"], 2, "--profile"),
    ("doctor-pool-zero", ["doctor", "--pool-bytes", "0"], 2, "--pool-bytes"),
    ("bench-transfer-tokens-negative", ["bench", "transfer", "--tokens", "-1"], 2, "--tokens"),
    ("bench-transfer-tokens-huge", ["bench", "transfer", "--tokens", "100000000000"], 2, "--tokens: needs ~"),
    ("bench-transfer-partial-page", ["bench", "transfer", "--tokens", "2K"], 2, "--tokens: 2,000 is not a whole"),
    ("bench-transfer-repeat-0", ["bench", "transfer", "--repeat", "0"], 2, "--repeat"),
    ("bench-memory-30GiB", ["bench", "memory", "--sizes", "30GiB"], 2, "--sizes: needs ~"),
    ("bench-memory-backend-absent", ["bench", "memory", "--backend", "cuda", "--sizes", "4MiB", "--copy-size", "4MiB"],
     2, "--backend: backend 'cuda' is not available here"),
    ("bench-memory-backend-count", ["bench", "memory", "--backend", "count", "--sizes", "4MiB", "--copy-size", "4MiB"],
     2, "--backend: count moves no bytes"),
    ("bench-replay-limit-0", ["bench", "replay", "--trace", "{trace.jsonl}", "--limit", "0"], 2, "--limit"),
    ("bench-replay-empty", ["bench", "replay", "--trace", "{empty.jsonl}"], 2, "--trace: {empty.jsonl}"),
    ("plan-layout-long", ["plan", "--host-layout", "x" * 500, "--attention", "mla", "--tokens", "1", "--layers", "1"],
     2, "--host-layout: invalid choice"),
    ("unknown-option", [*SMALL_PLAN, "--kv-dim", "8", "--tokens", "64", "--no-such-option"], 2,
     "unrecognized arguments"),
]


def hicache(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 120):
    """Run this checkout's `hicache` in `cwd`; a marker in its environment finds any child it left."""
    marker = uuid.uuid4().hex
    full = {**os.environ, "PYTHONPATH": str(REPO), "HICACHE_TEST_MARKER": marker, **(env or {})}
    full.pop("HICACHE_TRACEBACK", None)
    proc = subprocess.run([sys.executable, "-m", "conformance.cli.main", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=timeout)
    return proc, marker


class Forked:
    """What subprocess.run returns, for a case run in a forked child."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def hicache_forked(args: list[str], cwd: Path, env: dict | None = None) -> tuple[Forked, str]:
    """main(args) in a forked child with its own cwd, environment and stdout/stderr files; an
    exception escaping main prints its traceback and exits 1, as the interpreter would."""
    marker = uuid.uuid4().hex
    out, err = cwd.parent / f".{marker}.out", cwd.parent / f".{marker}.err"
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.chdir(cwd)
            os.environ.update({"HICACHE_TEST_MARKER": marker, **(env or {})})
            os.environ.pop("HICACHE_TRACEBACK", None)
            for fd, path in ((1, out), (2, err)):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), fd)
            sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
            from conformance.cli.main import main

            code = main(args)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + 60  # a child that hangs fails the case instead of the suite
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"hicache {args} did not finish in 60 s")
        time.sleep(0.01)
    result = Forked(os.waitstatus_to_exitcode(status), out.read_text(), err.read_text())
    out.unlink()
    err.unlink()
    return result, marker


def processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"HICACHE_TEST_MARKER={marker}".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def shm_files() -> set[str]:
    from hal.memory.shm import PREFIX

    return {n for n in os.listdir("/dev/shm") if n.startswith(PREFIX)}


def leaked_shm(before: set[str]) -> set[str]:
    """New shared-buffer files whose creator is gone: what the refused command left behind.
    (Files of other tests running alongside belong to live processes and are not counted.)"""
    from hal.memory.shm import owner_alive

    return {n for n in shm_files() - before if owner_alive(n) is False}


def assert_one_line_refusal(proc, code: int, named: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Error:" not in lines[0].split(": ", 2)[-1][:20]
    assert lines[0].startswith("hicache: ") and named in lines[0], lines[0]
    assert len(lines[0]) < 500
    return lines[0]


@pytest.mark.parametrize("argv, code, named", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_naming_the_option_and_leaves_nothing(tmp_path, argv, code, named):
    paths = files(tmp_path / "in")
    work = tmp_path / "cwd"
    work.mkdir()
    fill = {f"{{{k}}}": str(v) for k, v in paths.items()}

    def sub(text: str) -> str:
        for k, v in fill.items():
            text = text.replace(k, v)
        return text

    before_shm = shm_files()
    # A fixed budget, so the memory refusals do not depend on what this machine has free.
    proc, marker = hicache_forked([sub(a) for a in argv], work, env={BUDGET: "16GiB"})
    line = assert_one_line_refusal(proc, code, sub(named))
    assert proc.stdout == ""
    assert "y" * 100 not in line and "x" * 100 not in line and "/usr/sbin/nologin bin:" not in line  # file contents echoed at most briefly
    assert list(work.iterdir()) == []
    assert not leaked_shm(before_shm)
    assert processes_with(marker) == []


# One real subprocess per command: the same refusal through `python -m conformance.cli.main`.
SUBPROCESS_CASES = ["plan-kv-dim-0", "replay-trace-gzip", "conform-out-file", "doctor-profile-folder",
                    "bench-transfer-tokens-negative", "bench-memory-30GiB", "bench-replay-empty"]


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_bad_input_through_the_interpreter(tmp_path, case):
    argv, code, named = next(c[1:] for c in CASES if c[0] == case)
    paths = files(tmp_path / "in")
    work = tmp_path / "cwd"
    work.mkdir()
    fill = {f"{{{k}}}": str(v) for k, v in paths.items()}
    sub = lambda text: [text := text.replace(k, v) for k, v in fill.items()][-1]  # noqa: E731
    proc, marker = hicache([sub(a) for a in argv], work, env={BUDGET: "16GiB"})
    assert_one_line_refusal(proc, code, sub(named))
    assert list(work.iterdir()) == [] and processes_with(marker) == []


@pytest.mark.slow  # runs the command or pytest in a child process
def test_read_only_working_folder_is_refused_naming_out():
    # /proc takes no new folders, even for root: conform's default OUT cannot be made there.
    proc, _ = hicache(["conform"], Path("/proc"))
    assert_one_line_refusal(proc, 2, "--out")
    assert "pass --out DIR" in proc.stderr


def test_version_prints_one_line_and_exits_0(tmp_path):
    (tmp_path / "cwd").mkdir()
    proc, _ = hicache_forked(["--version"], tmp_path / "cwd")
    assert proc.returncode == 0 and proc.stdout.startswith("hicache ") and len(proc.stdout.splitlines()) == 1


@pytest.mark.slow  # runs the command or pytest in a child process
def test_memlock_without_cap_ipc_lock_is_refused_naming_sizes(tmp_path):
    wrap = ["prlimit", "--memlock=65536", "setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"]
    if any(subprocess.run(["which", w], capture_output=True).returncode for w in ("prlimit", "setpriv")):
        pytest.skip("prlimit/setpriv not installed")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([*wrap, sys.executable, "-m", "conformance.cli.main", "bench", "memory", "--sizes", "4MiB",
                           "--copy-size", "1MiB", "--repeat", "1"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    if "setpriv" in proc.stderr:
        pytest.skip(f"cannot drop CAP_IPC_LOCK here: {proc.stderr.strip()}")
    assert_one_line_refusal(proc, 2, "--sizes")
    assert "RLIMIT_MEMLOCK" in proc.stderr


def test_unreadable_file_is_named_with_the_option(tmp_path, monkeypatch):
    # Root reads any file, so the refusal is exercised by making the open fail.
    p = tmp_path / "trace.jsonl"
    p.write_text(REQUEST)
    real_open = Path.open

    def deny(self, *a, **k):
        if self == p:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *a, **k)

    monkeypatch.setattr(Path, "open", deny)
    with pytest.raises(CliError, match=r"^--trace: .*trace\.jsonl: cannot be read \(Permission denied\)$"):
        inputs.text_file("--trace", p)


def test_clip_bounds_what_is_echoed():
    assert clip("a\nb") == "a b"
    assert len(clip("x" * 1000)) == 80 and clip("x" * 1000).endswith("...")


@pytest.mark.parametrize("argv, warning", [
    (["--trace", "{empty}"], "no request replayed"),
    (["--trace", "/dev/null"], "no request replayed"),
    (["--trace", "{trace}", "--limit", "0"], "no request replayed"),
    (["--trace", "{trace}", "--l1-tokens", "64"], "3 of 3 requests did not fit in L1"),
])
def test_runs_on_nothing_or_truncated_succeed_with_a_warning(tmp_path, argv, warning):
    (tmp_path / "t.jsonl").write_text(REQUEST * 3)
    (tmp_path / "e.jsonl").write_text("")
    argv = [a.replace("{trace}", str(tmp_path / "t.jsonl")).replace("{empty}", str(tmp_path / "e.jsonl")) for a in argv]
    (tmp_path / "cwd").mkdir()
    proc, _ = hicache_forked(["replay", *argv], tmp_path / "cwd")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hicache: warning: ") and warning in lines[0]



def _command(monkeypatch, run):
    """`hicache` with one command whose body is `run`."""
    import argparse

    from conformance.cli import main as cli

    class Parser:
        def parse_args(self, _argv):
            return argparse.Namespace(_run=run)

    monkeypatch.setattr(cli, "build_parser", lambda _argv: Parser())
    return cli


@pytest.mark.parametrize("behind", ["cause", "context"])
def test_a_cleanup_error_raised_while_ctrl_c_unwinds_the_run_is_reported_as_the_interrupt(monkeypatch, capsys, behind):
    """A transfer cut short by Ctrl-C fail-stops its controller; the cleanup that then raises that
    failure is the interrupt's consequence: "interrupted", exit 130, never an internal error."""
    from hicache_ref.core.controller_state import TransferError

    def run(_args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            if behind == "cause":
                raise TransferError("d2h transfer 'backup' (64 tokens) failed: KeyboardInterrupt()") from e
            raise TransferError("d2h transfer 'backup' (64 tokens) failed")  # noqa: B904 - raised in cleanup

    assert _command(monkeypatch, run).main(["replay"]) == 130
    assert capsys.readouterr().err == "hicache: interrupted\n"


def test_a_failure_with_no_interrupt_behind_it_is_still_an_internal_error(monkeypatch, capsys):
    def run(_args):
        try:
            raise ValueError("handled")
        except ValueError:
            raise RuntimeError("a bug")  # noqa: B904

    assert _command(monkeypatch, run).main(["replay"]) == 1
    assert "internal error: RuntimeError: a bug" in capsys.readouterr().err
