"""What every doctor check returns, where it reads the host's facts, and how sizes are shown.

Shared by the check modules (topology_checks, huge_pages, host_memory, pinned_memory), the advice
and the run (`checks`). HostPaths roots /sys, /proc and /dev/shm so a test can hand in a synthetic host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from hal.topology.topology_model import GIB

STATUSES = ("ok", "warn", "fail", "unknown")
MIB = 1 << 20
TEST_BUFFER_BYTES = 4 * MIB  # two 2 MB pages: enough to see placement and THP, cheap anywhere


class Check(NamedTuple):
    name: str
    status: str  # one of STATUSES
    value: str
    fix: str


def fmt_bytes(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / MIB:.1f} MiB" if n >= MIB // 10 else f"{n:,} B"


@dataclass(frozen=True)
class HostPaths:
    """Where the host's facts are read: the real /sys, /proc and /dev/shm, or a synthetic host's."""

    sys_root: str = "/sys"
    proc_root: str = "/proc"
    shm_dir: str = "/dev/shm"

    @property
    def real(self) -> bool:
        return self.sys_root == "/sys" and self.proc_root == "/proc"


def read_text(path: str) -> str | None:
    """The text of `path`, None when it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


__all__ = ["GIB", "MIB", "STATUSES", "TEST_BUFFER_BYTES", "Check", "HostPaths", "fmt_bytes", "read_text"]
