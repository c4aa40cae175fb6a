"""Which way a transfer goes: the one Direction type of plans, profiles and backends.

A str enum, so "d2h" passed as a plain string still compares, hashes, formats and serializes
the same as Direction.D2H; code that takes a direction accepts either.
"""

from __future__ import annotations

from enum import Enum


class Direction(str, Enum):
    D2H = "d2h"  # device pool -> host pool: a backup (write)
    H2D = "h2d"  # host pool -> device pool: a load
    D2D = "d2d"  # within device memory: does not cross the host link
    H2H = "h2h"  # within host memory: does not cross the host link

    __str__ = str.__str__  # the value, as a StrEnum prints (Python 3.10 has no StrEnum)

    @classmethod
    def of(cls, src_on_device: bool, dst_on_device: bool) -> Direction:
        """The direction of a copy from its two ends."""
        return cls(f"{'d' if src_on_device else 'h'}2{'d' if dst_on_device else 'h'}")

    @property
    def crosses_host_link(self) -> bool:
        return self in (Direction.D2H, Direction.H2D)


# What a pool transfer (device pool <-> host pool) may be.
POOL_DIRECTIONS = (Direction.D2H, Direction.H2D)
