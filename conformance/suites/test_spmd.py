"""SPMD allocation determinism across real TP ranks, and the TP-shared host pool's safety.

Rank processes run one seeded workload with real bytes: 2, 4 and 8 ranks decide as one rank does,
shared or private; every read is bit-identical; an injected divergence is caught at its op; a
failure or a killed rank fails the others in bounded time, one that stops moving is named with
its op; no shared file is left, and it is 0600.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time

import pytest

from hicache_ref.tp.launch import launch
from hicache_ref.tp.report import report
from hicache_ref.tp.workload import WorkloadConfig

OPS = 120  # enough for evictions, write-backs, L2 evictions and load-backs in this geometry
TIMEOUT = 8.0  # collective timeout in the failure tests: what "bounded" means here


@pytest.fixture
def run_on(backend_name, backend):
    """Run a workload on N ranks of this suite's backend; backends that move no bytes cannot."""
    if not backend.capabilities().moves_bytes:
        pytest.skip(f"{backend_name} moves no bytes; the SPMD suite checks real KV")

    def run(ranks: int, **kw):
        cfg = WorkloadConfig(ops=kw.pop("ops", OPS), backend=backend_name, **kw)
        return cfg, launch(cfg, ranks)

    return run


def _sweep_stale_dirs(parent: str) -> None:
    """Remove empty hicache-spmd-<pid>-* folders whose run died before its teardown (a Ctrl-C'd
    conform child is killed, not unwound); a live run's folder, or one holding files, stays."""
    for name in os.listdir(parent):
        parts = name.split("-")
        if name.startswith("hicache-spmd-") and len(parts) > 3 and parts[2].isdigit():
            if not os.path.exists(f"/proc/{parts[2]}"):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(parent, name))  # only if empty


@pytest.fixture
def shared_dir():
    parent = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    _sweep_stale_dirs(parent)
    d = tempfile.mkdtemp(prefix=f"hicache-spmd-{os.getpid()}-", dir=parent)
    yield d
    leftover = os.listdir(d)
    for name in leftover:
        os.unlink(os.path.join(d, name))
    os.rmdir(d)
    assert not leftover, f"files left in the shared directory: {leftover}"


def _ok(cfg, outcomes) -> dict:
    assert [o.status for o in outcomes] == ["ok"] * len(outcomes), [o.payload for o in outcomes if o.status != "ok"]
    return report(cfg, outcomes[0].payload)


_ALONE: dict = {}


def _alone_digest(run_on, order: str) -> str:
    if order not in _ALONE:
        _ALONE[order] = _ok(*run_on(1, free_list=order))["digest"]
    return _ALONE[order]


@pytest.mark.parametrize("order", ["fifo", "lifo"])
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_ranks_decide_alike_with_a_shared_pool(run_on, shared_dir, ranks, order):
    rep = _ok(*run_on(ranks, free_list=order, shared=True, shared_dir=shared_dir))
    assert rep["consistent"] and rep["first_divergence"] is None
    assert rep["digest"] == _alone_digest(run_on, order)  # N ranks decide as one rank alone does
    assert rep["read_mismatches"] == 0 and rep["reads_identical"]
    assert rep["host_bytes_total"] == rep["host_pool"]["nbytes"]  # one copy for the group
    assert all(b >= rep["host_bytes_total"] for b in rep["registered_bytes_by_rank"].values())  # each rank registered it
    if "policy_restored" in rep["host_pool"]:  # interleaved while faulted and registered, then put back
        assert rep["host_pool"]["policy_restored"] and rep["host_pool"]["policy_achieved"]
    d2h = rep["d2h_bytes_by_rank"]
    assert d2h["0"] > 0 and all(d2h[str(r)] == 0 for r in range(1, ranks))  # only rank 0 writes
    assert len(set(rep["h2d_bytes_by_rank"].values())) == 1 and rep["h2d_bytes_by_rank"]["0"] > 0  # all load alike


def test_shared_and_private_runs_decide_alike(run_on, shared_dir):
    shared = _ok(*run_on(2, seed=3, shared=True, shared_dir=shared_dir))
    private = _ok(*run_on(2, seed=3))
    assert shared["digest"] == private["digest"]
    assert private["host_bytes_total"] == 2 * shared["host_bytes_total"]
    assert private["d2h_bytes_by_rank"]["1"] == private["d2h_bytes_by_rank"]["0"] == shared["d2h_bytes_by_rank"]["0"]


def test_every_rank_reads_identical_kv_under_writer_delays(run_on, shared_dir):
    rep = _ok(*run_on(4, shared=True, shared_dir=shared_dir, d2h_delay_ms=4.0))
    assert rep["read_mismatches"] == 0 and rep["reads_identical"]
    assert len(set(rep["pages_read_by_rank"].values())) == 1 and rep["pages_read_by_rank"]["0"] > 0


@pytest.mark.parametrize("op", [0, 45, OPS - 1])
def test_injected_divergence_is_caught_at_its_op(run_on, shared_dir, op):
    cfg, outcomes = run_on(2, shared=True, shared_dir=shared_dir, inject_divergence_at=op, check_every=16)
    assert [o.status for o in outcomes] == ["diverged", "diverged"]
    for o in outcomes:
        assert o.payload["op"] == op and o.payload["what"] == "allocator decisions"
        assert o.payload["decisions"][0] != o.payload["decisions"][1]


def test_a_rank_killed_mid_run_fails_the_others_in_bounded_time(run_on, shared_dir):
    t0 = time.monotonic()
    _, outcomes = run_on(4, shared=True, shared_dir=shared_dir, timeout=TIMEOUT, faults={"kill_at": [2, 40]})
    assert time.monotonic() - t0 < TIMEOUT + 10
    assert outcomes[2].status == "died" and "SIGKILL" in outcomes[2].payload
    for o in (outcomes[0], outcomes[1], outcomes[3]):
        assert o.status == "error" and "GroupError" in o.payload and "collective" in o.payload, o


def test_a_rank_that_stops_moving_is_named_with_its_op_in_bounded_time(run_on, shared_dir):
    from hicache_ref.tp.launch import MARGIN_SECONDS

    t0 = time.monotonic()
    _, outcomes = run_on(3, shared=True, shared_dir=shared_dir, timeout=3.0, faults={"hang_at": [1, 30]})
    assert time.monotonic() - t0 < 3.0 + MARGIN_SECONDS + 15
    assert outcomes[1].status == "died" and outcomes[1].payload == f"no progress for {3 + MARGIN_SECONDS:g} s at op 30: killed"
    for o in (outcomes[0], outcomes[2]):  # waiting for it in a collective, they fail on their own
        assert o.status == "error" and "GroupError" in o.payload and "collective" in o.payload, o


@pytest.mark.parametrize("faults, reason", [
    ({"fail_attach_rank": 1}, "shared host pool attach failed: rank 1: attach: injected failure"),
    ({"kill_in_setup_rank": 0}, "collective"),  # rank 0 dies between creating the file and unlinking it
    ({"kill_in_setup_rank": 2}, "collective"),
])
def test_setup_failure_fails_every_rank_and_leaves_no_file(run_on, shared_dir, faults, reason):
    t0 = time.monotonic()
    _, outcomes = run_on(3, shared=True, shared_dir=shared_dir, timeout=TIMEOUT, faults=faults)
    assert time.monotonic() - t0 < TIMEOUT + 10
    assert all(o.status in ("error", "died") for o in outcomes)
    assert any(reason in str(o.payload) for o in outcomes if o.status == "error")
    # shared_dir's teardown asserts that the directory is empty


def test_shared_file_is_0600_and_closed_to_other_users(run_on, shared_dir):
    rep = _ok(*run_on(2, ops=8, shared=True, shared_dir=shared_dir))
    assert rep["host_pool"]["file_mode"] == "0600"
    # The same primitive rank 0 uses, kept named long enough for another user to try it.
    from hal.memory.host import allocate_host

    os.chmod(shared_dir, 0o755)  # only the file's own mode may stop the other user
    with allocate_host(1 << 16, shared_dir=shared_dir, keep_name=True, huge_pages=False) as buf:
        path = buf.shared_path
        assert os.stat(path).st_mode & 0o777 == 0o600
        if os.geteuid() != 0:
            pytest.skip("not root: cannot try the file as another user")
        import pwd

        nobody = pwd.getpwnam("nobody")

        def as_nobody(target: str) -> subprocess.CompletedProcess:
            return subprocess.run(["/bin/cat", target], capture_output=True, text=True, timeout=30,
                                  preexec_fn=lambda: (os.setgroups([]), os.setgid(nobody.pw_gid),
                                                      os.setuid(nobody.pw_uid)))

        control = os.path.join(shared_dir, "readable-control")
        with open(control, "w") as f:
            f.write("x")
        os.chmod(control, 0o644)
        try:  # the other user can reach the directory: only the KV file's mode keeps it out
            assert as_nobody(control).returncode == 0
        finally:
            os.unlink(control)
        probe = as_nobody(path)
        assert probe.returncode != 0 and "Permission denied" in probe.stderr, probe.stderr
