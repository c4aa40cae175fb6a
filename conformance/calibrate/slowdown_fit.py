"""The translation fit: DMA time per byte against the translation entries of the registered
region, rho = slope / intercept (host_costs.translation_slowdown_per_mentry: DMA time times
1 + rho * E / 1e6), with standard errors, and whether the line is measured well enough to write.

Points may come in groups (one round of one region size: its 4 KB and THP timings, taken back
to back) that each get their own intercept, so load that drifts between rounds or a cache effect
of the region's size moves an intercept, not the common slope; the intercept of rho is their mean.
A line is judged by its slope's uncertainty, not R^2: a flat line (rho ~ 0) with a small
standard error is a result. It is refused when the standard error of rho exceeds both rho and
the resolution (the rho that would slow DMA by RESOLUTION at the largest region measured), or
is negative beyond twice it (more entries never speed DMA up); a negative rho within it is 0.
"""

from __future__ import annotations

import math

import numpy as np

from hardware_profiles.field_checks import HOST_COST_BOUNDS

# A slowdown this small at the largest region measured is below what the probe resolves:
# a rho whose standard error stays under it is written even when the estimate is ~0.
RESOLUTION = 0.05
RHO_MAX = HOST_COST_BOUNDS["translation_slowdown_per_mentry"].hi


def line_with_errors(xs, ys, groups=None) -> dict:
    """Least squares y = a_g + b x (one intercept per group; one group when `groups` is None):
    b, a (the mean of the a_g), their standard errors and covariance from the residuals.
    ValueError naming the argument for mismatched lengths, non-finite values, no spread of x
    within the groups, or no degree of freedom left."""
    x = np.asarray(xs, dtype=np.float64).ravel()
    y = np.asarray(ys, dtype=np.float64).ravel()
    g = np.zeros(x.size, dtype=np.int64) if groups is None else np.unique(np.asarray(groups), return_inverse=True)[1]
    if y.shape != x.shape or g.shape != x.shape:
        raise ValueError(f"ys, groups: expected {x.size} values each, got {y.size} and {g.size}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("xs, ys: every value must be finite")
    k = int(g.max()) + 1 if x.size else 0
    dof = x.size - k - 1
    if dof < 1:
        raise ValueError(f"xs: {x.size} points in {k} group(s) leave no degree of freedom for a standard error")
    design = np.zeros((x.size, k + 1))
    design[np.arange(x.size), g] = 1.0
    design[:, k] = x
    gram = design.T @ design
    if np.linalg.matrix_rank(gram) < k + 1:
        raise ValueError("xs: the entries do not vary within any group: no slope to fit")
    beta = np.linalg.solve(gram, design.T @ y)
    res = y - design @ beta
    s2 = float(res @ res) / dof
    cov = s2 * np.linalg.inv(gram)
    w = np.append(np.full(k, 1.0 / k), 0.0)  # a = the mean intercept
    a, b = float(w @ beta), float(beta[k])
    return {"a": a, "b": b, "se_a": math.sqrt(max(0.0, float(w @ cov @ w))), "se_b": math.sqrt(max(0.0, cov[k, k])),
            "cov_ab": float(w @ cov[:, k]), "dof": dof, "groups": k, "points": int(x.size),
            "rmse": math.sqrt(float(res @ res) / x.size), "residuals": [float(r) for r in res]}


def slowdown_fit(mentries, seconds_per_byte, groups=None) -> dict:
    """rho = slope / intercept of seconds per byte on million translation entries, its standard
    error (first order in the fit's errors), and the verdict: 'accepted' with the value to write
    (rho floored at 0, as the profile bounds it), or not with the reason."""
    line = line_with_errors(mentries, seconds_per_byte, groups)
    x_max = float(max(mentries))
    out = {"fit": line, "x_max_mentries": x_max}
    return {**out, **judge_ratio(line, x_max, "rho", "per million entries", "M entries", RHO_MAX,
                                 "the entries", "retake with more --repeat on a quieter host")}


def judge_ratio(line: dict, x_max: float, symbol: str, per: str, x_unit: str, bound: float, what: str,
                retake: str) -> dict:
    """slope / intercept of a fitted line (`symbol`: its name in the reasons; `per`: its unit), its
    standard error, and whether to write it: refused when the error exceeds both the estimate and
    the resolution (RESOLUTION's slowdown at `x_max`), when negative beyond twice its error (`what`
    else must vary), or past `bound`; a negative value within its error is written 0."""
    a, b = line["a"], line["b"]
    if not a > 0:
        return {symbol: None, "se": None, "accepted": False, "value": None,
                "why": f"the line's intercept ({a:.3g} s/B) is not positive: no transfer time to scale"}
    ratio = b / a
    var = (line["se_b"] ** 2 + ratio * ratio * line["se_a"] ** 2 - 2 * ratio * line["cov_ab"]) / (a * a)
    se = math.sqrt(max(0.0, var))
    resolution = RESOLUTION / max(x_max, 1e-12)
    out = {symbol: ratio, "se": se, "resolution": resolution}
    if se > max(ratio, resolution):  # a negative estimate resolves no slowdown: only the resolution counts
        return {**out, "accepted": False, "value": None,
                "why": f"{symbol} {ratio:.4g} +/- {se:.2g} {per}: the standard error exceeds the estimate "
                       f"and the resolution {resolution:.2g} (a {RESOLUTION:.0%} slowdown at {x_max:.3g} {x_unit}); "
                       f"{retake}"}
    if ratio < 0 and ratio + 2 * se < 0:
        return {**out, "accepted": False, "value": None,
                "why": f"{symbol} {ratio:.4g} +/- {se:.2g} {per} is negative beyond twice its standard error: "
                       f"something other than {what} varies with the region; retake on a quieter host"}
    if ratio > bound:
        return {**out, "accepted": False, "value": None,
                "why": f"{symbol} {ratio:.4g} {per} is above the profile's bound {bound:g}"}
    return {**out, "accepted": True, "value": max(0.0, ratio), "why": ""}
