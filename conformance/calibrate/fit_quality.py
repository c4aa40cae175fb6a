"""Whether a fitted link figure (a slope) is measured well enough to write: its uncertainty, not R^2.

R^2 says how much of y's spread the slope explains, so a flat line measured precisely (emu's
per-segment cost: the copy engine merges segments, ~0.04 us) scores near 0 and a steep noisy one
scores well. What a profile needs is the slope itself, known well enough:
- its standard error (from the residuals, n - 2 degrees of freedom) is within REL_SE_MAX of the
  slope, or below the resolution: the slope that would move y by RESOLUTION of its mean across
  the x range measured (a cost below what the probe resolves is a result: ~0, known to be small);
- the points lie near the line: rms residual within REL_RMSE_MAX of y's mean.
"""

from __future__ import annotations

import math

import numpy as np

REL_SE_MAX = 0.25  # the slope known to within a quarter of itself
RESOLUTION = 0.05  # a slope moving y by under 5% of its mean over the x range measured is below resolution
REL_RMSE_MAX = 0.10  # points further than a tenth of y's mean from the line: the line does not describe them
RULES = {"rel_se_max": REL_SE_MAX, "resolution": RESOLUTION, "rel_rmse_max": REL_RMSE_MAX}


def slope_standard_error(xs, ys) -> tuple[float, float, float]:
    """(slope, its standard error, rms residual) of least squares y = a + b x. The error is
    sqrt(SS_res / (n - 2) / Sxx); infinite with no degree of freedom left (two points)."""
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    dx = x - x.mean()
    sxx = float(dx @ dx)
    if x.size < 2 or sxx <= 0:
        raise ValueError(f"xs: need at least two distinct x values, got {x.tolist()[:8]}")
    b = float(dx @ (y - y.mean())) / sxx
    res = y - (y.mean() + b * dx)
    ss_res = float(res @ res)
    se = math.sqrt(ss_res / (x.size - 2) / sxx) if x.size > 2 else math.inf
    return b, se, math.sqrt(ss_res / x.size)


def judge(xs, ys) -> dict:
    """The slope, its standard error, the resolution and relative residual, and the verdict
    (accepted, or why not) for the fit of `ys` on `xs`."""
    b, se, rmse = slope_standard_error(xs, ys)
    mean = abs(float(np.mean(ys)))
    span = float(np.max(xs) - np.min(xs))
    resolution = RESOLUTION * mean / span
    rel_rmse = rmse / mean if mean > 0 else math.inf
    out = {"b": b, "se_b": se, "resolution": resolution, "rel_rmse": rel_rmse}
    if rel_rmse > REL_RMSE_MAX:
        return {**out, "accepted": False, "why": f"the points lie {rel_rmse:.0%} (rms) of their mean from the line "
                f"(at most {REL_RMSE_MAX:.0%})"}
    if se > max(REL_SE_MAX * abs(b), resolution):
        return {**out, "accepted": False, "why": f"slope {b:.4g} +/- {se:.2g}: the standard error exceeds "
                f"{REL_SE_MAX:.0%} of the slope and the resolution {resolution:.2g} (a {RESOLUTION:.0%} change "
                "over the range measured)"}
    return {**out, "accepted": True, "why": ""}
