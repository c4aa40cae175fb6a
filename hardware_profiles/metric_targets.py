"""What a run must reach: a profile's targets, each a comparison of one named metric with a value.

Metric names are stable (METRICS): consumers measure them under the same names, so a target with a
misspelt metric fails to load rather than never being checked.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hardware_profiles.field_checks import FieldError
from hardware_profiles.values import is_number

COMPARATORS = ("<=", ">=", "<", ">", "==")

# Stable metric names that targets may use: name -> (unit, what is measured).
METRICS: dict[str, tuple[str, str]] = {
    "plan_segments_layer_first_seed": ("segments", "segments in the seed transfer (hal.transfer.seed), host layout layer_first"),
    "plan_segments_page_first_direct_seed": ("segments", "segments in the seed transfer (hal.transfer.seed), page_first_direct"),
    "plan_seconds_seed": ("s", "wall time to build the seed transfer plan (page_first_direct)"),
    "h2d_gbps": ("GB/s", "host-to-device bandwidth of large registered transfers"),
    "d2h_gbps": ("GB/s", "device-to-host bandwidth of large registered transfers"),
    "transfer_ratio_vs_memcpy": ("ratio", "backend transfer throughput / plain memcpy throughput, same run"),
    "per_card_host_gib_local": ("GiB", "host memory one card can use with strictly NUMA-local binding"),
    "host_pool_page_bytes": ("B", "page size backing the host KV pool"),
    "d2h_submit_block_s": ("s", "longest time the scheduler thread blocks submitting a D2H backup"),
    "ghost_entry_bytes": ("B", "host memory per ghost-list entry"),
}


@dataclass(frozen=True)
class Target:
    """A number a run must reach. `tolerance` is absolute, in `unit`, and always loosens:
    '<=' passes up to value + tolerance, '>=' down to value - tolerance, '==' within it."""

    name: str
    metric: str
    comparator: str
    value: float
    tolerance: float
    unit: str
    source: str
    note: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise FieldError("name", "a snake_case target name", repr(self.name))
        if self.metric not in METRICS:
            raise FieldError("metric", f"a known metric ({', '.join(METRICS)})", repr(self.metric))
        unit = METRICS[self.metric][0]
        if self.comparator not in COMPARATORS:
            raise FieldError("comparator", f"one of {' '.join(COMPARATORS)}", repr(self.comparator))
        for key, what in (("value", "a finite number"),
                          ("tolerance", "a non-negative number (absolute, same unit)")):
            v = getattr(self, key)
            if not is_number(v) or not math.isfinite(v) or (key == "tolerance" and v < 0):
                raise FieldError(key, f"{what} of {unit}", repr(v))
            object.__setattr__(self, key, float(v))
        if self.unit != unit:
            raise FieldError("unit", f"{unit!r} (the unit of metric {self.metric})", repr(self.unit))
        for key in ("source", "note"):
            v = getattr(self, key)
            if not isinstance(v, str) or (key == "source" and not v.strip()):
                raise FieldError(key, "a non-empty string", repr(v))

    def check(self, measured: float) -> bool:
        m = float(measured)
        if math.isnan(m):
            return False
        v, t = self.value, self.tolerance
        return {
            "<=": m <= v + t, "<": m < v + t, ">=": m >= v - t, ">": m > v - t, "==": abs(m - v) <= t,
        }[self.comparator]

    def describe(self) -> str:
        tol = f" (tolerance {self.tolerance:g})" if self.tolerance else ""
        return f"{self.metric} {self.comparator} {self.value:g} {self.unit}{tol}"
