"""The pytest child that `hicache conform` runs: worker count, its process group, its exit status.

The child comes from hal.children (its own process group, dies with its parent), so Ctrl-C
stops it and its xdist workers together; pytest's own usage error becomes our bad-input exit.
"""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path

from conformance.common.errors import EXIT_BAD_INPUT, CliError, clip
from hal import children


def workers_args(value: str) -> list[str]:
    if value in ("0", "1") or importlib.util.find_spec("xdist") is None:
        return []
    if value == "auto":
        return ["-n", "auto"] if (os.cpu_count() or 1) > 1 else []
    if not value.isdigit():
        raise CliError("--workers", f"{clip(repr(value))} is not 'auto' or a number")
    return ["-n", value]


def run_child(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> int:
    """pytest in its own process group, killed if we die; on Ctrl-C or SIGTERM the whole group
    (xdist workers too) is stopped quietly, SIGTERM first, then SIGKILL, before the interrupt
    goes on to main."""
    proc = children.start(cmd, cwd=cwd, env=env)
    try:
        return proc.wait()
    except BaseException:
        children.stop(proc)
        raise


PYTEST_USAGE_ERROR = 4


def pytest_exit(rc: int) -> int:
    """pytest's own exit status as ours: its usage error (4: a bad argument after --) is bad input."""
    return EXIT_BAD_INPUT if rc == PYTEST_USAGE_ERROR else rc


def killed_line(rc: int) -> str | None:
    """For pytest ended by a signal (`rc` < 0, as Popen says it): one line saying which and what
    to change; None otherwise. A SIGKILL nobody here sent is most likely the OOM killer's (the
    child is its first choice: hal.children), so the line gives the memory this machine has."""
    if rc >= 0:
        return None
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = f"signal {-rc}"
    if -rc != signal.SIGKILL:
        return f"pytest was ended by {name} before it wrote its report"
    return (f"pytest was killed (SIGKILL) before it wrote its report, most likely by the OOM killer{_memory_to_give()}; "
            "give the run more memory, or fewer workers (-n)")


def crashed_workers_line(failures: list[dict]) -> str | None:
    """For failures that are pytest-xdist workers dying mid-test (no report of their own): one line
    saying how many and what to change; None when there are none. A worker is its own process, so the
    OOM killer (which picks the children first: hal.children) ends it without a word."""
    crashed = [f["test"] for f in failures if f.get("worker_died")]
    if not crashed:
        return None
    return (f"{len(crashed)} test(s) failed because their pytest worker died under them (first: {crashed[0]}), "
            f"most likely killed by the OOM killer{_memory_to_give()}; give the run more memory, or fewer workers (-n)")


def _memory_to_give() -> str:
    from hal.memory.budget import available_bytes, fmt

    room = available_bytes()
    return "" if room is None else f" (this machine has {fmt(room)} to give: the least of MemAvailable and the cgroup's room, x 0.8)"
