"""How sure a modeled figure is: the profile's parameters as a deterministic ensemble, every figure
re-priced across it, and the answer word that follows from the interval.

A replay's cache decisions do not depend on the profile's parameters, so a figure's interval comes
from pricing one replay once per ensemble member. Member 0 is the profile itself (the central value);
the others are plausible parameter sets (the derived parameters drawn from their covariance, each
`assumed:` value over its stated range, each measured value by its standard error): same profile,
same members, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

INTERVAL_PCT = (5.0, 95.0)  # the reported interval: 5th to 95th percentile over the ensemble
ANSWERS = ("gain", "loss", "undecided")


ENSEMBLE_SIZE = 64  # members, the profile itself included: enough for a 5-95% interval, cheap to price
ENSEMBLE_SEED = 37
_MEMBERS: dict[tuple, tuple] = {}
_STATS_SOURCE: list = []  # the derivation's statistics of a profile (hicache_ref.sim.fit.derivation_cache registers)


def register_stats(source) -> None:
    """`source(profile)` -> the derivation's statistics or None: what members draw derived values from.
    Registered by hicache_ref.sim.fit.derivation_cache when imported (the derivation prices with the
    mechanisms, whose figures carry intervals: a registry keeps the imports one way)."""
    _STATS_SOURCE[:] = [source]


_DRAWING: set = set()  # profiles whose members are being drawn (their derivation replays the seed scenario)


def ensemble(profile) -> tuple:
    """Plausible parameter sets of `profile`, member 0 the profile itself. Deterministic (seeded),
    cached per profile. The other members draw, together: the jointly derived parameters from
    their covariance (hicache_ref.sim.fit.derive; clipped to the fit's bounds, the exact ones solved
    again), each assumed value uniformly over its stated `range` (moving the derived ones as a refit
    would), each measured value with a `stderr` from a normal (clipped to its bound). A profile
    with none of these has ENSEMBLE_SIZE copies of itself; an unknown value stays unknown. LookupError
    when no derivation is registered (register_stats), rather than members that leave its spread out."""
    k = (profile, tuple(sorted(profile.ranges.items())), tuple(sorted(profile.stderrs.items())))
    if k not in _MEMBERS:
        if k in _DRAWING:  # the derivation's own replays price themselves: with the profile alone
            return (profile,)
        if not _STATS_SOURCE:  # members without the derivation's spread would give too narrow an interval
            raise LookupError("no derivation registered to draw the ensemble from: import "
                              "hicache_ref.sim.fit.derivation_cache first (the hicache command does)")
        _DRAWING.add(k)
        try:
            _MEMBERS[k] = _draw(profile, _STATS_SOURCE[0](profile) if _STATS_SOURCE else None)
        finally:
            _DRAWING.discard(k)
    out = _MEMBERS[k]
    return out if out[0] is profile else (profile, *out[1:])  # an equal profile loaded again: itself first


def _value(profile, key: str):
    sec, name = key.split(".")
    return getattr(getattr(profile, sec), name)


def _with(profile, values: dict):
    """`profile` with `section.key` values replaced."""
    import dataclasses

    sections: dict = {}
    for key, v in values.items():
        sec, name = key.split(".")
        sections.setdefault(sec, {})[name] = v
    return dataclasses.replace(profile, **{sec: dataclasses.replace(getattr(profile, sec), **kw)
                                           for sec, kw in sections.items()})


def _draw(profile, stats) -> tuple:
    import numpy as np

    from hardware_profiles.field_checks import (
        COMPUTE_BOUNDS,
        COMPUTE_OPTIONAL_BOUNDS,
        HOST_COST_BOUNDS,
        KERNEL_BOUNDS,
        L3_LINK_BOUNDS,
        LINK_BOUNDS,
    )

    bounds = {**{f"link.{k}": b for k, b in {**LINK_BOUNDS, **KERNEL_BOUNDS}.items()},
              **{f"compute.{k}": b for k, b in {**COMPUTE_BOUNDS, **COMPUTE_OPTIONAL_BOUNDS}.items()},
              **{f"host_costs.{k}": b for k, b in HOST_COST_BOUNDS.items()},
              **{f"l3_link.{k}": b for k, b in L3_LINK_BOUNDS.items()}}
    ranged = sorted(k for k in profile.ranges if k in bounds and _value(profile, k) is not None)
    measured = sorted(k for k in profile.stderrs if k in bounds and _value(profile, k) is not None)
    rng = np.random.default_rng(ENSEMBLE_SEED)
    members = [profile]
    for _ in range(ENSEMBLE_SIZE - 1):
        values = {}
        for k in ranged:
            a, b = profile.ranges[k]
            values[k] = float(rng.uniform(a, b))
        for k in measured:
            b = bounds[k]
            x = float(rng.normal(_value(profile, k), profile.stderrs[k]))
            values[k] = min(max(x, b.lo + (1e-12 if b.lo_open else 0.0)), b.hi)
        if stats is not None:  # the derived values, drawn jointly, then the exact ones solved again
            members.append(stats.member(profile, values, rng))
        else:
            members.append(_with(profile, values) if values else profile)
    return tuple(members)


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


def central_interval(values: Sequence[float], pct: tuple[float, float] = INTERVAL_PCT) -> tuple[float, float]:
    """The interval of `values` (interval) widened to hold values[0], the central value (member 0,
    the profile itself). Member 0 is one draw of the ensemble's spread, not its median, and may lie
    at an extreme of it: a central figure outside its own interval reads as broken and could take
    an answer word of the other sign."""
    lo, hi = interval(values, pct)
    c = float(values[0])
    return min(lo, c), max(hi, c)


def answer(ttft_change_interval: tuple[float, float]) -> str:
    """gain when the whole interval of the TTFT change is below zero, loss when above, else undecided."""
    lo, hi = ttft_change_interval
    if hi < 0:
        return "gain"
    if lo > 0:
        return "loss"
    return "undecided"
