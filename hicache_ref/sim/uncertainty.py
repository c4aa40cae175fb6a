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
_DRAWING: set = set()  # profiles whose members are being drawn (their derivation replays the seed scenario)


def ensemble(profile) -> tuple:
    """Plausible parameter sets of `profile`, member 0 the profile itself. Deterministic (seeded),
    cached per profile. The other members draw, together: the jointly derived parameters from
    their covariance (hicache_ref.sim.derive; clipped to the fit's bounds, the exact ones solved
    again), each assumed value uniformly over its stated `range` (moving the derived ones as a refit
    would), each measured value with a `stderr` from a normal (clipped to its bound). A profile
    with none of these has ENSEMBLE_SIZE copies of itself; an unknown value stays unknown."""
    from hicache_ref.sim import derivation_cache

    k = derivation_cache.key(profile)
    if k not in _MEMBERS:
        if k in _DRAWING:  # the derivation's own replays price themselves: with the profile alone
            return (profile,)
        _DRAWING.add(k)
        try:
            _MEMBERS[k] = _draw(profile, derivation_cache.stats(profile))
        finally:
            _DRAWING.discard(k)
    out = _MEMBERS[k]
    return out if out[0] is profile else (profile, *out[1:])  # an equal profile loaded again: itself first


def _draw(profile, stats) -> tuple:
    import numpy as np

    from hardware_profiles.model import (
        COMPUTE_BOUNDS,
        COMPUTE_OPTIONAL_BOUNDS,
        HOST_COST_BOUNDS,
        KERNEL_BOUNDS,
        L3_LINK_BOUNDS,
        LINK_BOUNDS,
    )
    from hicache_ref.sim import derive as d

    bounds = {**{f"link.{k}": b for k, b in {**LINK_BOUNDS, **KERNEL_BOUNDS}.items()},
              **{f"compute.{k}": b for k, b in {**COMPUTE_BOUNDS, **COMPUTE_OPTIONAL_BOUNDS}.items()},
              **{f"host_costs.{k}": b for k, b in HOST_COST_BOUNDS.items()},
              **{f"l3_link.{k}": b for k, b in L3_LINK_BOUNDS.items()}}
    ranged = sorted(k for k in profile.ranges if k in bounds and d.value(profile, k) is not None)
    measured = sorted(k for k in profile.stderrs if k in bounds and d.value(profile, k) is not None)
    rng = np.random.default_rng(ENSEMBLE_SEED)
    if stats is not None:
        fit = stats.derivation
        w, v = np.linalg.eigh((fit.cov + fit.cov.T) / 2)
        root = v * np.sqrt(np.clip(w, 0.0, None))  # cov = root root^T, positive semi-definite or not
        lo, hi = np.array([j[1] for j in d.JOINT]), np.array([j[2] for j in d.JOINT])
    members = [profile]
    for _ in range(ENSEMBLE_SIZE - 1):
        values = {}
        for k in ranged:
            a, b = profile.ranges[k]
            values[k] = float(rng.uniform(a, b))
        for k in measured:
            b = bounds[k]
            x = float(rng.normal(d.value(profile, k), profile.stderrs[k]))
            values[k] = min(max(x, b.lo + (1e-12 if b.lo_open else 0.0)), b.hi)
        if stats is not None:
            x = fit.x + root @ rng.standard_normal(len(fit.x))
            for k, shift in stats.shift.items():
                x = x + shift * (values[k] - d.value(profile, k))
            x = np.clip(x, lo, hi)
            values.update({j[0]: float(xi) for j, xi in zip(d.JOINT, x, strict=True)})
            q = d.with_values(profile, **values)
            members.append(d.exact(q, stats.readings, {}))
        else:
            members.append(d.with_values(profile, **values) if values else profile)
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


def answer(ttft_change_interval: tuple[float, float]) -> str:
    """gain when the whole interval of the TTFT change is below zero, loss when above, else undecided."""
    lo, hi = ttft_change_interval
    if hi < 0:
        return "gain"
    if lo > 0:
        return "loss"
    return "undecided"
