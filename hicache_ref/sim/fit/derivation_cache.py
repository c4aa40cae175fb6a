"""A profile's derivation statistics, computed once per process: what the ensemble draws from.

The joint fit (hicache_ref.sim.fit.derive.derive_fit) on the seed scenario's replays, and how its
optimum moves with each assumed value the readings depend on (d x* / d a, by the linearised fit:
-(J^T J)^-1 J^T dr/da), so a member that draws an assumed value shifts the fitted parameters the
way a refit would. The seed scenario's replays are kept per readings file (`remember` hands over
ones already made): they price themselves with the profile alone while its ensemble is drawn.
"""

from __future__ import annotations

import numpy as np

from hicache_ref.sim.fit import derive as d
from hicache_ref.sim.price import mechanisms as mech

_RUNS: dict[tuple, object] = {}
_STATS: dict[tuple, object] = {}
SENSITIVITY_STEP = 1e-3  # relative step of an assumed value for d x* / d a


def key(profile) -> tuple:
    return (profile, tuple(sorted(profile.ranges.items())), tuple(sorted(profile.stderrs.items())))


def remember(profile, runs) -> None:
    """Replays of `profile`'s seed scenario (hicache_ref.sim.ladder.scenario.Runs) to reuse here. A replay's
    cache decisions do not depend on the profile's parameters, so every profile naming the same
    readings file shares them."""
    from hardware_profiles.measured_readings import load_readings

    readings = load_readings(profile)
    if readings is not None:
        _RUNS.setdefault(str(readings.path), runs)


class Stats:
    """x (JOINT values), cov, and `shift` {assumed key: d x* / d a} of one profile's derivation."""

    def __init__(self, derivation, shift: dict, readings):
        self.derivation, self.shift, self.readings = derivation, shift, readings
        w, v = np.linalg.eigh((derivation.cov + derivation.cov.T) / 2)
        self.root = v * np.sqrt(np.clip(w, 0.0, None))  # cov = root root^T
        self.lo, self.hi = np.array([j[1] for j in d.JOINT]), np.array([j[2] for j in d.JOINT])

    def member(self, profile, values: dict, rng):
        """`profile` with `values` (drawn assumed and measured ones), the fitted parameters drawn from
        the covariance and shifted by the drawn assumed values as a refit would, clipped to the fit's
        bounds, and the exact ones solved again. A value the profile states itself (measured, as
        `calibrate --prefill` writes them, or assumed with a range) is drawn around what the profile
        holds, never replaced by the readings' derivation: member 0 is the profile, and the others
        must spread around it."""
        fit = self.derivation
        x = fit.x + self.root @ rng.standard_normal(len(fit.x))
        for k, shift in self.shift.items():
            x = x + shift * (values[k] - d.value(profile, k))
        x = np.clip(x, self.lo, self.hi)
        joint = {j[0]: float(xi) for j, xi in zip(d.JOINT, x, strict=True) if j[0] not in values}
        q = d.exact(d.with_values(profile, **values, **joint), self.readings, {})
        return d.with_values(q, **values)


def stats(profile):
    """The profile's Stats, or None when it has no readings or the readings cannot be priced."""
    k = key(profile)
    if k in _STATS:
        return _STATS[k]
    from hardware_profiles.measured_readings import load_readings
    from hicache_ref.sim.fit.modeled_readings import replay_pairs
    from hicache_ref.sim.ladder.seed_scenario import seed_requests, seed_runs

    readings = load_readings(profile)
    out = None
    if readings is not None:
        runs = _RUNS.setdefault(str(readings.path), None) or seed_runs(readings, seed_requests(), profile)
        _RUNS[str(readings.path)] = runs
        runs.prefetch(replay_pairs(readings, d.JOINT_READINGS))
        try:
            fit = d.derive_fit(profile, readings, runs)
            out = Stats(fit, _shifts(fit, readings, runs), readings)
        except mech.Unpriced:
            out = None
    _STATS[k] = out
    return out


def _shifts(fit, readings, runs) -> dict:
    """{assumed key with a range: d x* / d a} for those the joint readings depend on."""
    p = fit.profile
    norms = np.linalg.norm(fit.jac, axis=0)
    scale = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)
    out = {}
    for k in sorted(p.ranges):
        if k.split(".")[0] not in ("link", "compute", "host_costs") or d.value(p, k) is None:
            continue
        a = float(d.value(p, k))
        h = SENSITIVITY_STEP * abs(a) or SENSITIVITY_STEP
        up = d.residual_function(d.with_values(p, **{k: a + h}), readings, runs, fit.readings_used)(fit.x)
        dr = (up - fit.residuals) / h
        if not np.any(dr):
            continue
        y, *_ = np.linalg.lstsq(fit.jac * scale, -dr, rcond=None)
        out[k] = y * scale
    return out


from hicache_ref.sim.price import uncertainty  # noqa: E402  (the registry it fills)

uncertainty.register_stats(stats)
