"""Real rank processes: the visibility protocol is needed, runs reproduce, torchrun and the CLI work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from hicache_ref.tp.launch import launch
from hicache_ref.tp.report import KEYS, report
from hicache_ref.tp.workload import WorkloadConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT)


pytestmark = pytest.mark.slow  # real rank processes


@pytest.fixture
def shared_dir():
    d = tempfile.mkdtemp(prefix="hicache-tp-test-", dir="/dev/shm")
    yield d
    left = os.listdir(d)
    for name in left:
        os.unlink(os.path.join(d, name))
    os.rmdir(d)
    assert not left, left


def test_without_the_gate_a_delayed_writer_lets_other_ranks_read_stale_kv(shared_dir):
    """The negative control of the visibility protocol: the same run with it off reads wrong bytes."""
    cfg = WorkloadConfig(ops=200, seed=1, shared=True, shared_dir=shared_dir, gate=False, d2h_delay_ms=25.0,
                         check_every=10_000)
    outcomes = launch(cfg, 2)
    bad_reads = [o for o in outcomes if o.status == "diverged" and o.payload["what"] == "KV bytes read"]
    if not bad_reads:  # the check found equal reads: then some must have been counted wrong
        assert report(cfg, outcomes[0].payload)["read_mismatches"] > 0
    cfg_on = WorkloadConfig(ops=200, seed=1, shared=True, shared_dir=shared_dir, d2h_delay_ms=10.0, check_every=10_000)
    rep = report(cfg_on, launch(cfg_on, 2)[0].payload)
    assert rep["read_mismatches"] == 0 and rep["reads_identical"]


def test_the_same_seed_gives_the_same_report(shared_dir):
    cfg = WorkloadConfig(ops=80, seed=11, shared=True, shared_dir=shared_dir, free_list="lifo")
    a, b = (report(cfg, launch(cfg, 2)[0].payload) for _ in range(2))
    assert a == b and a["consistent"]
    other = WorkloadConfig(ops=80, seed=12, shared=True, shared_dir=shared_dir, free_list="lifo")
    assert report(other, launch(other, 2)[0].payload)["digest"] != a["digest"]


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_group_runs_under_torchrun(shared_dir):
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "hicache_ref.tp.worker",
                          "--ops", "40", "--shared", "--shared-dir", shared_dir, "--timeout", "20"],
                         capture_output=True, text=True, env=ENV, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    rep = json.loads(out.stdout[out.stdout.index("{"):])
    assert rep["ranks"] == 2 and rep["consistent"] and rep["d2h_bytes_by_rank"]["1"] == 0


def in_process(capsys, *args) -> tuple[int, str, str]:
    from conformance.cli import main

    code = main.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_reports_the_issue_keys(shared_dir, capsys):
    code, stdout, stderr = in_process(capsys, "spmd", "--tp", "2", "--ops", "60", "--seed", "4", "--shared-host",
                                      "--shared-dir", shared_dir, "--json")
    assert code == 0, stderr
    rep = json.loads(stdout)
    assert list(rep)[: len(KEYS)] == list(KEYS)
    assert rep["ranks"] == 2 and rep["ops"] == 60 and rep["consistent"] and rep["first_divergence"] is None
    assert rep["host_bytes_total"] == rep["host_pool"]["nbytes"] and rep["d2h_bytes_by_rank"]["1"] == 0
    private = json.loads(in_process(capsys, "spmd", "--tp", "2", "--ops", "60", "--seed", "4", "--json")[1])
    assert private["digest"] == rep["digest"] and private["host_bytes_total"] == 2 * rep["host_bytes_total"]
    assert private["d2h_bytes_by_rank"]["1"] == private["d2h_bytes_by_rank"]["0"] > 0


def test_cli_injected_divergence_exits_non_zero_at_that_op(capsys):
    code, stdout, stderr = in_process(capsys, "spmd", "--tp", "3", "--ops", "50", "--inject-divergence-at", "17",
                                      "--check-every", "8", "--json")
    assert code == 1
    rep = json.loads(stdout)
    assert rep["consistent"] is False and rep["first_divergence"]["op"] == 17
    assert set(rep["first_divergence"]["decisions"]) == {"0", "1", "2"}
    assert stderr.strip().splitlines() == ["hicache: spmd: allocator decisions differ first at op 17"]


@pytest.mark.parametrize("args, where", [
    (["--tp", "0"], "--tp"), (["--tp", "65"], "--tp"), (["--ops", "x"], "--ops"),
    (["--free-list", "mru"], "--free-list"), (["--check-every", "0"], "--check-every"),
    (["--ops", "10", "--inject-divergence-at", "10"], "--inject-divergence-at"),
    (["--tp", "1", "--inject-divergence-at", "0"], "--inject-divergence-at"),
    (["--shared-host", "--shared-dir", "/nonexistent/dir"], "--shared-dir"),
    (["--shared-host", "--shared-dir", "/etc/passwd"], "--shared-dir"),
    (["--backend", "nope"], "--backend"), (["--backend", "count"], "--backend"),
])
def test_cli_bad_input_is_one_line_naming_the_option(args, where, capsys):
    code, stdout, stderr = in_process(capsys, "spmd", *args)
    assert code == 2 and stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hicache: {where}") and "Traceback" not in stderr


def test_cli_a_rank_failure_is_one_line_and_exit_1(monkeypatch, capsys):
    from conformance.cli import main, spmd
    from hicache_ref.tp.launch import RankOutcome

    died = [RankOutcome(0, "error", "GroupError: rank 0: collective all_gather failed (a rank died...)", 1),
            RankOutcome(1, "died", "exited with signal SIGKILL before reporting", -9)]
    monkeypatch.setattr(spmd, "launch", lambda cfg, ranks: died)
    assert main.main(["spmd", "--tp", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hicache: spmd: rank 1: exited with signal SIGKILL before reporting; "
                   "rank 0: GroupError: rank 0: collective all_gather failed (a rank died...)"]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


@pytest.mark.slow  # runs the command or pytest in a child process
def test_sigkill_of_hicache_spmd_takes_its_ranks_down_and_leaves_no_file(shared_dir):
    import signal
    import time

    cli = subprocess.Popen([sys.executable, "-m", "conformance.cli.main", "spmd", "--tp", "2", "--ops", "1000000",
                            "--shared-host", "--shared-dir", shared_dir], env=ENV, cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, ranks = time.monotonic() + 60, []
        while time.monotonic() < deadline and len(ranks) < 2:
            ranks = [g for c in _children(cli.pid) for g in _children(c)]
            time.sleep(0.2)
        assert len(ranks) == 2, "the ranks never started"
        helpers = _children(cli.pid)
        time.sleep(1.0)  # let the ranks get past setup
    finally:
        cli.send_signal(signal.SIGKILL)
        cli.wait(30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in ranks + helpers):
        time.sleep(0.2)
    assert not [p for p in ranks if os.path.exists(f"/proc/{p}")], "ranks outlived hicache spmd"
    # shared_dir's teardown asserts that no file was left
