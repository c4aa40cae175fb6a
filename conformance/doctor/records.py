"""What every doctor check returns, and how sizes are shown: shared by `checks` and `advice`."""

from __future__ import annotations

from typing import NamedTuple

from hal.topology.topology_model import GIB

STATUSES = ("ok", "warn", "fail", "unknown")
MIB = 1 << 20


class Check(NamedTuple):
    name: str
    status: str  # one of STATUSES
    value: str
    fix: str


def fmt_bytes(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / MIB:.1f} MiB" if n >= MIB // 10 else f"{n:,} B"


__all__ = ["GIB", "MIB", "STATUSES", "Check", "fmt_bytes"]
