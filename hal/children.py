"""Child processes that die with the process that started them, quietly.

Every child the harness starts (replay workers, the pytest child of conform, Mooncake servers)
comes from `start`: its own process group, so a terminal's Ctrl-C reaches only the parent, which
then stops the group (no KeyboardInterrupt traceback from a child), and PR_SET_PDEATHSIG, so the
kernel kills it when the parent dies, SIGKILL included (the `hicache` command turns SIGTERM into
an interrupt, so the parent's cleanup stops them first). Linux only; elsewhere the parent-death
signal is skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess

PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 5.0


def die_with_parent(parent: int | None = None) -> None:
    """In a child: ask the kernel for SIGKILL when the parent thread's process dies; exit now if
    `parent` (its pid) is already gone (it died before the request took effect)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no parent-death signal
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _preexec(parent: int):
    def preexec() -> None:  # between fork and exec: async-signal-safe calls only
        os.setpgid(0, 0)  # Popen's process_group=0, which Python 3.10 lacks
        die_with_parent(parent)

    return preexec


def start(cmd: list[str], **popen_kwargs) -> subprocess.Popen:
    """`subprocess.Popen(cmd, **popen_kwargs)` in its own process group, killed when we die."""
    return subprocess.Popen(cmd, preexec_fn=_preexec(os.getpid()), **popen_kwargs)


def stop(proc: subprocess.Popen, grace: float = STOP_GRACE_SECONDS) -> None:
    """Stop `proc`'s process group: SIGTERM, then SIGKILL after `grace` seconds; reap `proc`."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what the leader left of its group
    proc.wait()


def kill_now(proc: subprocess.Popen) -> None:
    """SIGKILL `proc`'s process group at once and reap `proc` (workers with no state to save)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
