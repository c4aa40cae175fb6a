"""The registered-size fit: DMA time per byte on THP against the GB registered, the entries' part
taken out by the translation fit's rho, sigma = slope / intercept (host_costs.registered_slowdown_per_gb:
DMA time times 1 + rho * E / 1e6 + sigma * GB), with its standard error and whether to write it.

THP regions have few translation entries, so what still grows with the region's size is the cost
per registered byte the seed work points to. Refused, saying why, when its standard error exceeds
both sigma and the resolution (the sigma that slows DMA by RESOLUTION at the largest region), or
sigma is negative beyond twice it; a negative sigma within its error is written 0.
"""

from __future__ import annotations

import math

from conformance.calibrate.slowdown_fit import RESOLUTION, line_with_errors
from hardware_profiles.model import HOST_COST_BOUNDS

SIGMA_MAX = HOST_COST_BOUNDS["registered_slowdown_per_gb"].hi


def registered_fit(gb, entries, seconds_per_byte, rho: float) -> dict:
    """sigma from THP points (`gb` registered, translation `entries`, seconds per byte), each point's
    entries term (rho per million) divided out first; 'accepted' with the value to write, or why not."""
    ys = [s / (1.0 + rho * e / 1e6) for s, e in zip(seconds_per_byte, entries, strict=True)]
    try:
        line = line_with_errors(gb, ys)
    except ValueError as e:
        return {"sigma": None, "se": None, "accepted": False, "value": None, "why": f"no fit: {e}"}
    a, b, x_max = line["a"], line["b"], float(max(gb))
    out = {"fit": line, "x_max_gb": x_max, "rho_divided_out": rho}
    if not a > 0:
        return {**out, "sigma": None, "se": None, "accepted": False, "value": None,
                "why": f"the line's intercept ({a:.3g} s/B) is not positive: no transfer time to scale"}
    sigma = b / a
    se = math.sqrt(max(0.0, (line["se_b"] ** 2 + sigma * sigma * line["se_a"] ** 2 - 2 * sigma * line["cov_ab"])
                       / (a * a)))
    resolution = RESOLUTION / max(x_max, 1e-12)
    out.update(sigma=sigma, se=se, resolution=resolution)
    if se > max(sigma, resolution):
        why = (f"sigma {sigma:.4g} +/- {se:.2g} per GB: the standard error exceeds the estimate and the resolution "
               f"{resolution:.2g} (a {RESOLUTION:.0%} slowdown at {x_max:.3g} GB); regions this small cannot "
               "resolve it: retake with larger --translation-sizes on a quieter host")
        return {**out, "accepted": False, "value": None, "why": why}
    if sigma < 0 and sigma + 2 * se < 0:
        return {**out, "accepted": False, "value": None,
                "why": f"sigma {sigma:.4g} +/- {se:.2g} per GB is negative beyond twice its standard error: "
                       "something other than the registered size varies with the region; retake on a quieter host"}
    if sigma > SIGMA_MAX:
        return {**out, "accepted": False, "value": None,
                "why": f"sigma {sigma:.4g} per GB is above the profile's bound {SIGMA_MAX:g}"}
    return {**out, "accepted": True, "value": max(0.0, sigma), "why": ""}
