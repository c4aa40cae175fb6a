"""How sure a modeled figure is: the profile's parameters as a deterministic ensemble, every figure
re-priced across it, and the answer word that follows from the interval.

A replay's cache decisions do not depend on the profile's parameters, so a figure's interval comes
from pricing one replay once per ensemble member. Member 0 is the profile itself (the central value);
the others are plausible parameter sets (a seeded bootstrap over the readings, and each `assumed:`
value drawn over its stated range): same profile, same members, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

INTERVAL_PCT = (5.0, 95.0)  # the reported interval: 5th to 95th percentile over the ensemble
ANSWERS = ("gain", "loss", "undecided")


def ensemble(profile) -> tuple:
    """Plausible parameter sets of `profile`, member 0 the profile itself. Deterministic."""
    return (profile,)


def interval(values: Sequence[float], pct: tuple[float, float] = INTERVAL_PCT) -> tuple[float, float]:
    """The (low, high) percentiles of `values` (linear interpolation, as numpy's default).
    ValueError naming the argument when empty or not finite."""
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("values: need at least one value")
    if not all(math.isfinite(v) for v in xs):
        raise ValueError("values: every value must be finite")

    def at(p: float) -> float:
        k = (len(xs) - 1) * p / 100.0
        lo = math.floor(k)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    return at(pct[0]), at(pct[1])


def answer(ttft_change_interval: tuple[float, float]) -> str:
    """gain when the whole interval of the TTFT change is below zero, loss when above, else undecided."""
    lo, hi = ttft_change_interval
    if hi < 0:
        return "gain"
    if lo > 0:
        return "loss"
    return "undecided"
