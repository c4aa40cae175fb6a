"""The hostile-input guards against the cases a user could still break them with (docs/hostile-cases.md, P), each a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli.main import main
from conformance.common import scratch
from hal.memory import budget
from hicache_ref.sim.trace.reader import read_trace
from hicache_ref.storage.file import MARKER, FileStorage

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30
CONFORM = ["conform", "--backend", "emu", "--profile", "emu", "-n", "2"]


def one_line_err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("args,says", [
    (["--setup-on"], "unrecognized arguments: --setup-on"),  # abbreviations are pytest's to refuse
    (["--version"], "--version"), (["-h"], "--help"), (["--pdb"], "--pdb"), (["--trace"], "--trace"),
    (["--lf"], "unrecognized arguments: --lf"),  # the cache plugin is off: --lf would select nothing
    (["-p", "no.such.module"], "no.such.module"), (["--import-mode=bogus"], "--import-mode"),
])
def test_more_pytest_arguments_that_would_run_nothing_are_refused_before_out(tmp_path, capsys, args, says):
    out = tmp_path / "o"
    assert main([*CONFORM, "--out", str(out), "--", *args]) == 2
    err = one_line_err(capsys)
    assert says in err and "internal error" not in err, err
    assert not out.exists()


def test_pytest_addopts_from_the_environment_cannot_slip_setup_only_in(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "--setup-only")
    assert main([*CONFORM, "--out", str(tmp_path / "o")]) == 2
    assert "--setup-only" in one_line_err(capsys) and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_stdin_closed_as_a_trace_is_one_line(tmp_path):
    proc = subprocess.run(f"{sys.executable} -m conformance.cli.main trace stats - <&-", shell=True, cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == "hicache: path: stdin (-) is closed; nothing to read", \
        proc.stderr


@pytest.mark.parametrize("line", ['{"timestamp": NaN, "input_length": 512, "hash_ids": [1]}',
                                  '{"timestamp": 1e400, "input_length": 512, "hash_ids": [1]}',
                                  '{"timestamp": 1, "input_length": 512, "hash_ids": [1e400]}',
                                  '{"timestamp": 1, "input_length": 512, "hash_ids": [1], "x": {"a": 1, "a": 2}}'])
def test_nan_infinity_and_nested_duplicates_are_named(tmp_path, line):
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=r"t\.jsonl: line 1: "):
        read_trace(path)


def test_a_hard_link_planted_as_an_object_is_neither_read_nor_touched(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret" * 1000)
    os.utime(outside, (1000, 1000))
    store = tmp_path / "store"
    with FileStorage(str(store), max_bytes=1 << 20) as s:
        os.link(outside, store / "k0.kv")
        s._rescan()
        assert s.stored_bytes == 0 and s._read_into("k0", []) == -1
    assert os.stat(outside).st_mtime == 1000


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_marker_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    (tmp_path / "elsewhere").write_text("x")
    if kind == "link":
        (tmp_path / "store").mkdir()
        (tmp_path / "store" / MARKER).symlink_to(tmp_path / "elsewhere")
    else:
        (tmp_path / "store").mkdir()
        os.mkfifo(tmp_path / "store" / MARKER)
    with pytest.raises(ValueError, match="not a regular file"):
        FileStorage(str(tmp_path / "store"), max_bytes=1 << 20)


def test_the_root_folder_is_no_store():
    with pytest.raises(ValueError, match="did not write"):
        FileStorage("/", max_bytes=1 << 20)


def test_the_cgroups_inactive_page_cache_counts_as_room(tmp_path, monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    (tmp_path / "cgroup").write_text("0::/job\n")
    job = tmp_path / "fs" / "job"
    job.mkdir(parents=True)
    (job / "memory.max").write_text(f"{5 * GIB}\n")
    (job / "memory.current").write_text(f"{5 * GIB}\n")  # full, of page cache mostly
    (job / "memory.stat").write_text(f"anon 1\ninactive_file {4 * GIB}\n")
    assert budget.cgroup_room(str(tmp_path / "cgroup"), str(tmp_path / "fs")) == 4 * GIB


@pytest.mark.parametrize("text", ["garbage\n", "", "0::\n1:memory\n"])
def test_a_strange_proc_cgroup_is_no_limit(tmp_path, text):
    (tmp_path / "cgroup").write_text(text)
    assert budget.cgroup_room(str(tmp_path / "cgroup"), str(tmp_path / "nothing")) is None


def test_a_budget_of_zero_is_refused(monkeypatch, capsys):
    monkeypatch.setenv(budget.BUDGET_ENV, "0")
    assert main(["trace", "stats", "/dev/null"]) == 2
    assert budget.BUDGET_ENV in one_line_err(capsys)


def test_a_link_planted_as_a_dead_runs_scratch_is_not_followed(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    where = scratch.parent()
    (where / "999999999-bench-l3-x").symlink_to(victim)
    with scratch.directory("bench-l3-"):
        pass
    assert (victim / "keep").read_text() == "mine"


def test_an_output_through_proc_self_fd_is_refused(capsys, tmp_path):
    assert main(["trace", "synth", "--out", "/proc/self/fd/1", "--requests", "2", "--min-tokens", "512",
                 "--max-tokens", "512", "--reuse", "0"]) == 2
    assert "symbolic link" in one_line_err(capsys)


def test_a_sighup_ignored_by_nohup_stays_ignored(tmp_path):
    import signal

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        main(["trace", "stats", "/dev/null"])
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
