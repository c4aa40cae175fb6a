"""The registered-size fit: DMA time per byte on THP against the GB registered, the entries' part
taken out by the translation fit's rho, sigma = slope / intercept (host_costs.registered_slowdown_per_gb:
DMA time times 1 + rho * E / 1e6 + sigma * GB), with its standard error and whether to write it.

THP regions have few translation entries, so what still grows with the region's size is the cost
per registered byte the seed work points to. Refused, saying why, when its standard error exceeds
both sigma and the resolution (the sigma that slows DMA by RESOLUTION at the largest region), or
sigma is negative beyond twice it; a negative sigma within its error is written 0.
"""

from __future__ import annotations

from conformance.calibrate.slowdown_fit import judge_ratio, line_with_errors
from hardware_profiles.field_checks import HOST_COST_BOUNDS

SIGMA_MAX = HOST_COST_BOUNDS["registered_slowdown_per_gb"].hi


def registered_fit(gb, entries, seconds_per_byte, rho: float) -> dict:
    """sigma from THP points (`gb` registered, translation `entries`, seconds per byte), each point's
    entries term (rho per million) divided out first; 'accepted' with the value to write, or why not."""
    ys = [s / (1.0 + rho * e / 1e6) for s, e in zip(seconds_per_byte, entries, strict=True)]
    try:
        line = line_with_errors(gb, ys)
    except ValueError as e:
        return {"sigma": None, "se": None, "accepted": False, "value": None, "why": f"no fit: {e}"}
    x_max = float(max(gb))
    out = {"fit": line, "x_max_gb": x_max, "rho_divided_out": rho}
    return {**out, **judge_ratio(line, x_max, "sigma", "per GB", "GB", SIGMA_MAX, "the registered size",
                                 "regions this small cannot resolve it: retake with larger --translation-sizes "
                                 "on a quieter host")}
