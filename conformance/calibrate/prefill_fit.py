"""The prefill terms fitted from measured TTFTs (conformance.calibrate.ttft_table), with standard errors.

No-hit table: TTFT = fixed + a n + b n^2 by ordinary least squares, the model's prefill of n tokens
with nothing cached (hardware_profiles ComputeModel). All-hit table (every prompt page loaded from
L2): TTFT = intercept + slope n, the seed's all-hit line; its intercept less the prefill's fixed
part and the load's launches is the L2 path (hicache_ref.sim.price.cost.allhit_seconds). Standard errors
from the residual variance and (X'X)^-1. A table that cannot tell the terms apart is refused,
saying what to measure.
"""

from __future__ import annotations

import math

import numpy as np

MIN_LENGTHS = 3  # three terms need three distinct prompt lengths
MIN_SPREAD = 4.0  # longest / shortest: below it n^2 is nearly a line in n and b is not determined
WHAT_TO_MEASURE = ("measure no-hit TTFTs at 4 or more prompt lengths spanning at least 4x, a few requests each "
                   "(e.g. 1K, 4K, 16K and 32K tokens, random prompts so nothing is cached; SGLang: "
                   "bench_serving --dataset-name random --random-input-len N --output-details)")


class Refused(ValueError):
    """The table cannot determine the terms; the message says what to measure."""


def _check(ns: np.ndarray, terms: int, what: str) -> None:
    distinct = np.unique(ns).astype(np.int64)
    if distinct.size < terms:
        raise Refused(f"{distinct.size} distinct prompt length(s) ({', '.join(map(str, distinct[:5]))}) cannot "
                      f"determine {terms} terms: {what}")
    if ns.size <= terms:
        raise Refused(f"{ns.size} requests leave no residual to judge {terms} terms by: {what}")
    if distinct[-1] < MIN_SPREAD * distinct[0] and terms == 3:
        raise Refused(f"prompt lengths span only {distinct[0]:,}-{distinct[-1]:,} tokens (under {MIN_SPREAD:g}x): "
                      f"the quadratic cannot be told from the linear term; {what}")


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coefficients, standard errors, residuals) of y on the columns of x; columns scaled to unit
    size first so n^2 next to 1 does not lose the fit to rounding."""
    scale = np.abs(x).max(axis=0)
    xs = x / scale
    coef, *_ = np.linalg.lstsq(xs, y, rcond=None)
    res = y - xs @ coef
    dof = y.size - x.shape[1]
    s2 = float(res @ res) / dof
    cov = s2 * np.linalg.inv(xs.T @ xs)
    return coef / scale, np.sqrt(np.clip(np.diag(cov), 0.0, None)) / scale, res


def fit_no_hit(rows) -> dict:
    """fixed, a, b with standard errors from (tokens, seconds, line) rows; Refused when degenerate."""
    ns = np.array([r[0] for r in rows], dtype=np.float64)
    ys = np.array([r[1] for r in rows], dtype=np.float64)
    _check(ns, 3, WHAT_TO_MEASURE)
    coef, se, res = _ols(np.column_stack([np.ones_like(ns), ns, ns * ns]), ys)
    names = ("prefill_fixed_s", "prefill_per_token_s", "prefill_per_token_pair_s")
    return _result(names, coef, se, res, ns, ys)


def fit_all_hit(rows) -> dict:
    """intercept and slope with standard errors from an all-hit table; Refused when degenerate."""
    ns = np.array([r[0] for r in rows], dtype=np.float64)
    ys = np.array([r[1] for r in rows], dtype=np.float64)
    _check(ns, 2, "measure all-hit TTFTs (each prompt sent once to fill L2, L1 flushed, then again) at 3 or more "
                  "lengths, e.g. 1K, 8K and 32K tokens")
    coef, se, res = _ols(np.column_stack([np.ones_like(ns), ns]), ys)
    return _result(("intercept_s", "slope_s_per_token"), coef, se, res, ns, ys)


def _result(names, coef, se, res, ns, ys) -> dict:
    lengths = {}
    for n, y, r in zip(ns.tolist(), ys.tolist(), res.tolist(), strict=True):
        lengths.setdefault(int(n), []).append((y, r))
    return {"terms": {k: {"value": float(c), "stderr": float(s)} for k, c, s in zip(names, coef, se, strict=True)},
            "requests": int(ns.size), "dof": int(ns.size - len(names)),
            "rmse_s": math.sqrt(float(res @ res) / ns.size),
            "lengths": [{"tokens": n, "requests": len(v), "median_s": float(np.median([y for y, _ in v])),
                         "mean_residual_s": float(np.mean([r for _, r in v]))} for n, v in sorted(lengths.items())]}


def written_terms(fit: dict) -> tuple[dict, list[str]]:
    """{key: (value, stderr)} to write, and notes: a negative term within two standard errors of 0
    is written 0 (noise); one beyond is refused (the table holds cache hits, queueing, or another model)."""
    out, notes = {}, []
    for key, t in fit["terms"].items():
        v, se = t["value"], t["stderr"]
        if v < 0:
            if v < -2 * se:
                raise Refused(f"fitted {key} = {v:.4g} +/- {se:.2g} is negative beyond its error: the table is not a "
                              "no-hit prefill (cache hits? requests queued behind each other? run one at a time, "
                              "random prompts)")
            notes.append(f"{key} {v:.4g} +/- {se:.2g}: negative within its error, written 0")
            v = 0.0
        out[key] = (v, se)
    return out, notes
