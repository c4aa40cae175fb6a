"""A child memory cgroup with a limit, for one test (root only): a command run in it sees the
limit as a container would. Skips the test with the reason where none can be made here."""

from __future__ import annotations

import contextlib
import os
import time

import pytest

ROOT = "/sys/fs/cgroup"


def _own_memory_cgroup() -> tuple[str, str] | None:
    """(folder of this process's memory cgroup, its limit file name), v1 or v2; None if neither."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            return os.path.join(ROOT, "memory", path.strip("/")), "memory.limit_in_bytes"
    for line in lines:
        if line.startswith("0::"):
            return os.path.join(ROOT, line[3:].strip("/")), "memory.max"
    return None


@contextlib.contextmanager
def memory_limited(limit_bytes: int):
    """Yields a command prefix that runs its command inside a new child cgroup limited to
    `limit_bytes`; the cgroup is removed after the block (its processes gone by then)."""
    own = _own_memory_cgroup()
    if own is None:
        pytest.skip("no memory cgroup of this process to make a child in")
    parent, limit_file = own
    child = os.path.join(parent, f"hicache-test-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.mkdir(child)
    except OSError as e:
        pytest.skip(f"cannot make a memory cgroup here: {e}")
    try:
        try:
            with open(os.path.join(child, limit_file), "w") as f:
                f.write(str(limit_bytes))
        except OSError as e:
            pytest.skip(f"cannot limit a memory cgroup here: {e}")
        yield ["sh", "-c", f'echo $$ > {child}/cgroup.procs && exec "$@"', "sh"]
    finally:
        for _ in range(50):  # a process that just exited may still be counted for a moment
            try:
                os.rmdir(child)
                break
            except OSError:
                time.sleep(0.1)
