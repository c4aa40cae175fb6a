"""The pytest child that `hicache conform` runs: worker count, its process group, its exit status.

The child dies with its parent (PR_SET_PDEATHSIG) and runs in its own process group, so Ctrl-C
stops it and its xdist workers together; pytest's own usage error becomes our bad-input exit.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import subprocess
from pathlib import Path

from conformance.common.errors import EXIT_BAD_INPUT, CliError, clip


def workers_args(value: str) -> list[str]:
    if value in ("0", "1") or importlib.util.find_spec("xdist") is None:
        return []
    if value == "auto":
        return ["-n", "auto"] if (os.cpu_count() or 1) > 1 else []
    if not value.isdigit():
        raise CliError("--workers", f"{clip(repr(value))} is not 'auto' or a number")
    return ["-n", value]


PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 5.0


def _die_with_parent(parent: int):
    """preexec for the pytest child: the kernel sends it SIGKILL when this process dies."""
    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def run_child(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> int:
    """pytest in its own process group; on Ctrl-C the whole group (xdist workers too) is stopped
    quietly, SIGTERM first, then SIGKILL, before KeyboardInterrupt goes on to main."""
    proc = subprocess.Popen(cmd, cwd=cwd, process_group=0, preexec_fn=_die_with_parent(os.getpid()), env=env)
    try:
        return proc.wait()
    except BaseException:
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        proc.wait()
        raise


PYTEST_USAGE_ERROR = 4


def pytest_exit(rc: int) -> int:
    """pytest's own exit status as ours: its usage error (4: a bad argument after --) is bad input."""
    return EXIT_BAD_INPUT if rc == PYTEST_USAGE_ERROR else rc
