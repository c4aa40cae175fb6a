"""A run whose pools this machine (or its cgroup) cannot hold is one line naming what to change,
before anything is built: not an OOM kill (exit 137), not SGLang's logged traceback.

Reference engine: materialized pools are checked as resolved (an L1 not given holds the whole
trace), L1 and L2 together. Sglang engine: the host pool against upstream's own rule (what it
sees available, less its reserve), and an allocation that fails anyway is one line too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conformance.cli.main import main
from hal.memory import budget
from hicache_ref.engines import replay_with
from hicache_ref.engines.sglang.pin import unavailable_reason
from hicache_ref.sim.trace.reader import find_trace
from hicache_ref.spec import CacheSpec
from tests.cgroups import memory_limited

GIB = 1 << 30
_WHY = unavailable_reason()


def needs_sglang(test):
    """In the SGLang environment's selection (-m needs_sglang), skipped with the reason elsewhere."""
    return pytest.mark.needs_sglang(pytest.mark.skipif(_WHY is not None, reason=f"sglang engine: {_WHY}")(test))


SMALL = dict(layers=1, kv_dim=128, l1_tokens=32768, l2_tokens=65536, page_size=64)  # 256-byte rows


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_materialized_pools_with_no_l1_given_are_checked_as_the_trace_sizes_them(monkeypatch, capsys):
    monkeypatch.setenv(budget.BUDGET_ENV, "256MiB")
    assert main(["replay", "--limit", "5", "--materialize", "--l2-tokens", "1024"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("hicache: --l1-tokens: needs ~") and "L1 not given" in line, line


@pytest.mark.parametrize(("l1", "l2", "named"), [(2048, 2048, "--l1-tokens"), (1024, 2560, "--l2-tokens")])
def test_materialized_tiers_that_fit_alone_but_not_together_name_the_larger(monkeypatch, l1, l2, named):
    monkeypatch.setenv(budget.BUDGET_ENV, "256MiB")  # ~88 KB rows: 2,048 tokens are ~172 MiB
    spec = CacheSpec.of(materialize=True, l1_tokens=l1, l2_tokens=l2)
    with pytest.raises(ValueError, match=f"^{named}: needs ~.*L1 {l1:,} \\+ L2 {l2:,} tokens"):
        replay_with("reference", spec, find_trace("conversation_trace.jsonl"), 5)


def _cli(prefix, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "conformance.cli.main", *args],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # runs the command in a child process
def test_a_materialized_replay_in_a_tight_cgroup_is_refused_not_oom_killed():
    with memory_limited(int(1.5 * GIB)) as prefix:
        proc = _cli(prefix, "replay", "--limit", "5", "--quiet", "--materialize", "--l2-tokens", "9000")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hicache: --l1-tokens: needs ~") and "cgroup" in err[0], err



def _upstream_sees(monkeypatch, available) -> None:
    """Upstream's host memory reading pinned at `available(its reserve)` bytes."""
    from sglang.srt.mem_cache.pool_host import base

    seen = available(base.HICACHE_HOST_MEMORY_RESERVE_BYTES)
    monkeypatch.setattr(base, "available_host_memory_bytes", lambda **kw: seen)


@needs_sglang
def test_a_host_pool_past_upstreams_room_names_l2_tokens_and_the_most_that_fits(monkeypatch, capsys):
    pool = SMALL["l2_tokens"] * 256
    _upstream_sees(monkeypatch, lambda reserve: reserve + pool // 2)
    trace = find_trace("conversation_trace.jsonl")
    with pytest.raises(ValueError, match=r"^--l2-tokens: SGLang's host pool of 65,536 tokens needs 16.0 MiB, "
                                         r"and SGLang keeps 10.0 GiB .*; give at most 32,704, or the run 8.0 MiB more"):
        replay_with("sglang", CacheSpec.of(**SMALL), trace, 2)
    # the most it names is what upstream then builds
    assert replay_with("sglang", CacheSpec.of(**dict(SMALL, l2_tokens=32704)), trace, 2)["requests"] == 2


@needs_sglang
def test_upstreams_reserve_past_what_it_sees_is_one_line_naming_the_memory_to_give(monkeypatch, capsys, caplog):
    _upstream_sees(monkeypatch, lambda reserve: reserve // 10)
    args = ["replay", "--engine", "sglang", "--limit", "2", *(f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items())]
    assert main(args) == 2
    line = one_error_line(capsys)
    assert line.startswith("hicache: --engine: sglang: SGLang's host pool of 65,536 tokens needs 16.0 MiB") \
        and "give the run at least 9.0 GiB more memory" in line and "--engine reference" in line, line
    assert not caplog.records


@needs_sglang
def test_upstreams_own_refusal_in_the_build_is_one_line_without_its_logged_traceback(monkeypatch, capsys, caplog):
    """Memory taken between the check and the build: upstream refuses; its logged traceback is held back."""
    _upstream_sees(monkeypatch, lambda reserve: reserve // 10)
    monkeypatch.setattr("hicache_ref.engines.sglang.engine_replay.refuse_host_pool", lambda *a: None)
    args = ["replay", "--engine", "sglang", "--limit", "2", *(f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items())]
    assert main(args) == 2
    line = one_error_line(capsys)
    assert line.startswith("hicache: --l2-tokens: SGLang could not allocate its KV pools (L1 32,768 + L2 65,536 "
                           "tokens of 256-byte rows): Not enough host memory"), line
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


@pytest.mark.slow  # runs the command in a child process
@needs_sglang
def test_the_sglang_engine_in_a_tight_cgroup_is_one_line_not_upstreams_traceback():
    with memory_limited(2 * GIB) as prefix:
        proc = _cli(prefix, "replay", "--engine", "sglang", "--limit", "5", "--quiet",
                    *(f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()))
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hicache: --engine: sglang: SGLang's host pool") \
        and "cgroup" in err[0], err


def _pytest_children(pid: int) -> list[int]:
    """`pid`'s children running pytest (conform may run other short commands first)."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        kids = [int(k) for k in f.read().split()]
    found = []
    for kid in kids:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                if b"\0-m\0pytest\0" in f.read():  # exec done: not the fork that has conform's command line
                    found.append(kid)
        except OSError:
            continue
    return found


@pytest.mark.slow  # runs conform and its pytest child
def test_conforms_pytest_is_the_oom_killers_first_choice_and_its_kill_one_line(tmp_path):
    """The OOM killer takes conform's pytest child, not conform (its oom_score_adj is the most),
    and conform says so in one line with the memory this machine has: exit 137, not 247 unexplained."""
    proc = subprocess.Popen([sys.executable, "-m", "conformance.cli.main", "conform", "--out", str(tmp_path / "r"),
                             "-n", "0", "-k", "test_layout_equivalence"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (kids := _pytest_children(proc.pid)) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        assert kids, "conform started no pytest child"
        with open(f"/proc/{kids[0]}/oom_score_adj") as f:
            assert f.read().strip() == "1000"
        with open(f"/proc/{proc.pid}/oom_score_adj") as f:
            assert f.read().strip() != "1000"
        os.kill(kids[0], signal.SIGKILL)  # as the OOM killer does
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 137, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hicache: pytest was killed (SIGKILL)") \
        and "OOM killer" in lines[0] and "-n" in lines[0], lines


_WORKER_KILLER = '''
import os, signal

def pytest_runtest_call(item):
    if os.environ.get("PYTEST_XDIST_WORKER") and not os.path.exists(os.environ["KILLED_ONCE"]):
        open(os.environ["KILLED_ONCE"], "w").close()
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer takes a worker
'''


@pytest.mark.slow  # runs conform, its pytest child and a worker
def test_a_worker_killed_under_a_test_is_a_failure_with_the_memory_line(tmp_path):
    """An xdist worker that dies mid-test leaves no report of its own: the test is a failure (never a
    pass), and conform adds one line on stderr saying a worker died, most likely of memory, and what
    to change."""
    (tmp_path / "worker_killer.py").write_text(_WORKER_KILLER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "KILLED_ONCE": str(tmp_path / "killed")}
    r = subprocess.run([sys.executable, "-m", "conformance.cli.main", "conform", "--out", str(tmp_path / "r"),
                        "-n", "2", "-k", "test_host_shapes_are_upstreams", "--", "-p", "worker_killer"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "FAIL" in r.stdout and "its pytest worker gw" in r.stdout and "died while running it" in r.stdout
    assert "Warning" not in r.stdout, r.stdout  # every mark the suites use is registered by conform's plugin
    lines = [line for line in r.stderr.splitlines() if line.startswith("hicache: ") and "worker" in line]
    assert len(lines) == 1 and lines[0].startswith("hicache: 1 test(s) failed because their pytest worker died") \
        and "OOM killer" in lines[0] and "-n" in lines[0], r.stderr
