"""A killed `hicache` leaves nothing behind: SIGTERM or SIGKILL a real `sweep --method replay` and a
real `spmd` mid-run; no child of theirs survives, no semaphore or shared-memory file is left, and
stderr holds at most the parent's one line (`hicache: terminated` for SIGTERM, nothing for SIGKILL).

Every process of a run carries a marker in its environment, so the scan of /proc finds them all,
whoever they were re-parented to. A leaked semaphore is a /dev/shm/sem.mp-* file created during
the run that no live process maps (other jobs on the host may hold their own meanwhile).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHM = Path("/dev/shm")
MARK = "HICACHE_TEST_RUN"


pytestmark = pytest.mark.slow  # real hicache processes killed mid-run


def marked(mark: str) -> set[int]:
    """Live (not zombie) processes whose environment carries MARK=mark."""
    needle = f"{MARK}={mark}".encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.add(int(name))
    return found


def mapped_shm() -> set[str]:
    """Names of /dev/shm files some live process maps."""
    names = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/maps") as f:
                    names |= {line.split("/dev/shm/", 1)[1].split()[0] for line in f if "/dev/shm/" in line}
            except OSError:
                continue
    return names


def start(args: list[str], tmp_path: Path) -> tuple[subprocess.Popen, str]:
    mark = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(REPO), MARK: mark}
    env.pop("HICACHE_TRACEBACK", None)
    # files, not pipes: a surviving child holding a pipe would hang the test instead of failing it
    proc = subprocess.Popen([sys.executable, "-m", "conformance.cli.main", *args], cwd=tmp_path, env=env,
                            stdout=(tmp_path / "out.txt").open("w"), stderr=(tmp_path / "err.txt").open("w"))
    return proc, mark


def wait_for(mark: str, proc: subprocess.Popen, children: int, tmp_path: Path, timeout: float = 120) -> None:
    """Until `children` processes besides the parent carry the mark (the run is under way)."""
    deadline = time.monotonic() + timeout
    while len(marked(mark) - {proc.pid}) < children:
        assert proc.poll() is None, (tmp_path / "err.txt").read_text()
        assert time.monotonic() < deadline, f"fewer than {children} children after {timeout} s"
        time.sleep(0.2)


def assert_nothing_left(proc, mark: str, sig: int, tmp_path: Path, sems_before: set[str]) -> None:
    proc.send_signal(sig)
    proc.wait(60)
    deadline = time.monotonic() + 15
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"survivors of the parent's {signal.Signals(sig).name}: {sorted(left)}"
    time.sleep(1)  # a child that lived on a little would have written by now
    err = (tmp_path / "err.txt").read_text()
    if sig == signal.SIGTERM:
        assert proc.returncode == 143 and err == "hicache: terminated\n", (proc.returncode, err)
    else:
        assert proc.returncode == -signal.SIGKILL and err == "", err
    new = {n for n in os.listdir(SHM) if n.startswith("sem.mp-")} - sems_before
    assert not new - mapped_shm(), f"semaphores left: {sorted(new - mapped_shm())}"


def sems() -> set[str]:
    return {n for n in os.listdir(SHM) if n.startswith("sem.mp-")}


SWEEP = ["sweep", "--method", "replay", "--l1-tokens", "256K", "--l2-tokens", "512K,1M,2M,4M", "--quiet"]


ABLATE_SEED = ["ablate", "--scenario", "seed", "--quiet"]  # its replays run ahead on the same workers


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("command", [SWEEP, ABLATE_SEED], ids=["sweep", "ablate"])
def test_a_killed_replay_sweep_leaves_no_worker_and_no_semaphore(tmp_path, sig, command):
    before = sems()
    proc, mark = start(command, tmp_path)
    wait_for(mark, proc, min(2, os.cpu_count() or 1), tmp_path)
    time.sleep(3)  # the workers are replaying by now
    assert_nothing_left(proc, mark, sig, tmp_path, before)


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_spmd_leaves_no_rank_no_forkserver_and_no_shared_file(tmp_path, sig):
    shared = tmp_path / "shared"
    shared.mkdir()
    before = sems()
    proc, mark = start(["spmd", "--tp", "2", "--ops", "20000", "--shared-host", "--shared-dir", str(shared)], tmp_path)
    wait_for(mark, proc, 4, tmp_path)  # the forkserver, the resource tracker and the ranks
    time.sleep(3)
    assert_nothing_left(proc, mark, sig, tmp_path, before)
    if sig == signal.SIGTERM:  # the launcher's cleanup ran; after a SIGKILL the next launch reaps them
        assert list(shared.iterdir()) == []


@pytest.mark.slow  # runs the command or pytest in a child process
def test_ctrl_c_on_a_replay_sweep_is_one_line_without_worker_tracebacks(tmp_path):
    # the workers are in their own process group: a terminal's Ctrl-C reaches the parent, which stops them
    before = sems()
    mark = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(REPO), MARK: mark}
    proc = subprocess.Popen([sys.executable, "-m", "conformance.cli.main", *SWEEP], cwd=tmp_path, env=env,
                            stdout=(tmp_path / "out.txt").open("w"), stderr=(tmp_path / "err.txt").open("w"),
                            start_new_session=True,  # its own group, as a terminal's foreground job
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(mark, proc, min(2, os.cpu_count() or 1), tmp_path)
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
    proc.wait(60)
    time.sleep(1)
    err = (tmp_path / "err.txt").read_text()
    assert proc.returncode == 130 and err == "hicache: interrupted\n", (proc.returncode, err)
    assert not marked(mark)
    assert not (sems() - before) - mapped_shm()


@pytest.mark.slow  # runs the command or pytest in a child process
def test_conform_on_mooncake_auto_says_the_clients_listen_on_every_interface(tmp_path):
    from hicache_ref.storage import mooncake_cluster

    if (why := mooncake_cluster.unavailable_reason()) is not None:
        pytest.skip(f"mooncake: {why}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "conformance.cli.main", "conform", "--storage", "mooncake:auto",
                          "-k", "no_test_has_this_name", "--out", str(tmp_path / "report")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 5, out.stderr  # -k matched no test
    warning = [line for line in out.stderr.splitlines() if "listen on every interface" in line]
    assert len(warning) == 1 and warning[0].startswith("hicache: warning: --storage mooncake:auto: "), out.stderr
    assert "0.0.0.0" in warning[0] and "[::]" in warning[0] and "firewall" in warning[0]
