"""Leave-one-out: the model's score as a predictor, not a fit.

Each reading of the joint fit (hicache_ref.sim.fit.derive.JOINT_READINGS) is left out in turn, every
parameter is derived again from the others, and the refitted model predicts the one left out. A
reading predicted within its tolerance counts (`readings_loo_within` of `readings_loo_total`); the
worst misses are named with their size in tolerances. The twelve refits run once per profile,
readings and replays (cached here), so every command that reports the score shares them.
"""

from __future__ import annotations

import math

from hicache_ref.sim.fit import derive as d
from hicache_ref.sim.fit.modeled_readings import model_value, tolerance, within
from hicache_ref.sim.price import mechanisms as mech

WORST = 3  # out-of-sample misses named in a report
_CACHE: dict[tuple, dict] = {}


def _miss(reading, model: float) -> float:
    """How far `model` is from the reading, in tolerances (a sign reading: 0 or 1)."""
    kind, size = tolerance(reading)
    if kind == "sign" or not size:
        return 0.0 if within(reading, model) else 1.0
    scale = size * abs(reading.value) if kind == "relative" else size
    return abs(model - reading.value) / scale


def leave_one_out(profile, readings, runs, names=d.JOINT_READINGS) -> dict:
    """{readings_loo_within, readings_loo_total, predictions: [{reading, seed, in_sample, left_out,
    within, miss_tolerances}], worst: [the WORST largest misses, as predictions]} for the readings
    `names` of the joint fit, each left out of a fit over the others. Unpriced (mechanisms) when
    the profile cannot price a reading."""
    preds = []
    for name in names:
        r = readings.reading(name)
        kept = tuple(n for n in d.JOINT_READINGS if n != name)
        refit, _ = d.derive(profile, readings, runs, kept)
        m = model_value(refit, r, readings, runs)
        ok = bool(within(r, m)) if math.isfinite(m) else False
        preds.append({"reading": name, "seed": r.value, "unit": r.unit, "in_sample": model_value(profile, r, readings, runs),
                      "left_out": m if math.isfinite(m) else None, "within": ok,
                      "miss_tolerances": _miss(r, m) if math.isfinite(m) else None})
    misses = sorted((p for p in preds if not p["within"]),
                    key=lambda p: -(p["miss_tolerances"] if p["miss_tolerances"] is not None else math.inf))
    return {"readings_loo_within": sum(p["within"] for p in preds), "readings_loo_total": len(preds),
            "predictions": preds, "worst": misses[:WORST]}


def _key(profile, readings, runs) -> tuple:
    return (profile, str(readings.path), tuple((r.name, r.value, r.state) for r in readings.readings),
            id(runs.engine) if runs.engine is not None else None)


def cached(profile, readings, runs) -> dict:
    """leave_one_out of the whole joint fit, once per profile, readings and engine; a profile the
    mechanisms cannot price gives {"not_measured": why} with no counts."""
    key = _key(profile, readings, runs)
    if key not in _CACHE:
        try:
            _CACHE[key] = leave_one_out(profile, readings, runs)
        except mech.Unpriced as e:
            _CACHE[key] = {"readings_loo_within": None, "readings_loo_total": None, "predictions": [], "worst": [],
                           "not_measured": str(e)}
    return _CACHE[key]
