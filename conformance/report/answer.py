"""The answer a conformance report opens with: on this profile's scenario, does HiCache pay off?

Taken from the reading rows (conformance.targets.reading_rows): the model's TTFT change with every fix
on against HiCache off (the `ttft_all_fixes` reading), gain or loss, the seed's figure beside it,
and how many readings the model meets: in sample, and left out (each jointly fitted reading
predicted by a fit without it, hicache_ref.sim.fit.loo). A profile without readings has no scenario.
"""

from __future__ import annotations

from hicache_ref.sim.fit.modeled_readings import ANSWER_READING
from hicache_ref.sim.price import uncertainty

# The answer word (hicache_ref.sim.price.spread) and the intervals a reading row carries for the answer reading.
INTERVAL_KEYS = ("answer", "ttft_change_pct_interval", "net_benefit_seconds_interval", "busy_seconds",
                 "busy_seconds_interval", "ensemble_members")
HEADLINES = {"gain": "gain: HiCache pays off", "loss": "loss: HiCache does not pay off",
             "undecided": "undecided: the model cannot tell whether HiCache pays off"}


def _scenario(profile) -> str | None:
    from hardware_profiles.measured_readings import load_readings

    try:
        readings = None if profile is None else load_readings(profile)
    except (ValueError, OSError):
        return None
    return None if readings is None else " ".join(str(readings.scenario["description"]).split())


def _elsewhere(profile) -> str:
    """Where a profile without readings gets its answer: the seed's workload, or the team's own trace."""
    if profile is None:
        return ""
    p = profile.name
    return (f" here; `hicache ablate --scenario seed --profile {p}` prices the seed's workload on it and "
            f"`hicache replay --profile {p} --trace YOURS.jsonl` the team's own traffic")


LOO_WORST = 3  # out-of-sample misses the answer names


def left_out(readings: list[dict]) -> dict:
    """readings_loo_within / readings_loo_total, each left-out prediction, and the worst misses,
    from the reading rows' seed rows (`loo_model`, `loo_within`)."""
    preds = []
    for r in readings:
        seed = r.get("reading") or {}
        if seed.get("loo_within") is None:
            continue
        preds.append({"reading": r["name"], "seed": r["target"], "unit": r["unit"], "in_sample": seed.get("model"),
                      "left_out": seed.get("loo_model"), "within": bool(seed["loo_within"])})

    def miss(p):
        return abs(p["left_out"] - p["seed"]) / (abs(p["seed"]) or 1.0) if p["left_out"] is not None else float("inf")
    worst = sorted((p for p in preds if not p["within"]), key=miss, reverse=True)[:LOO_WORST]
    return {"readings_loo_within": sum(p["within"] for p in preds) if preds else None,
            "readings_loo_total": len(preds) if preds else None, "loo_predictions": preds, "loo_worst": worst}


def answer(profile, rows: list[dict]) -> dict:
    """The `answer` of report.json and summary.json (conformance.report.report_schema.ANSWER)."""
    readings = [r for r in rows if r.get("kind") == "reading"]
    within = sum(r["verdict"] == "pass" for r in readings)
    outside = sum(r["verdict"] == "fail" for r in readings)
    out = {"scenario": _scenario(profile) if readings else None, "ttft_change_pct": None,
           "seed_ttft_change_pct": None, "gain": None, "readings_within": within, "readings_outside": outside,
           "readings_not_measured": len(readings) - within - outside, "readings_total": len(readings),
           "net_seconds": None, **dict.fromkeys(INTERVAL_KEYS), **left_out(readings)}
    key = next((r for r in readings if r["name"] == ANSWER_READING), None)
    name = "no profile" if profile is None else f"profile {profile.name}"
    if key is None:
        out["scenario"] = None
        out["text"] = (f"no scenario: {name} has no readings, so this report cannot say whether HiCache pays off"
                       + _elsewhere(profile) if not readings
                       else f"no scenario: {name}'s readings have no {ANSWER_READING} reading")
        return out
    out["seed_ttft_change_pct"] = key["target"]
    # busy seconds saved against HiCache off, when the reading's row gives them (`net_seconds`)
    out["net_seconds"] = (key.get("reading") or {}).get("net_seconds")
    change = key["value"] if key["verdict"] != "not_measured" else None
    if change is None:
        out["text"] = (f"on {name}'s scenario the model gives no TTFT change ({key['reason']}); "
                       f"the seed measured {key['target']:+.2f}%")
    else:
        out.update(ttft_change_pct=change, gain=change < 0)
        # the answer word and the intervals over the parameter ensemble (hicache_ref.sim.price.spread)
        out.update({k: (key.get("reading") or {}).get(k) for k in INTERVAL_KEYS})
        word = out["answer"] or uncertainty.answer((change, change))  # a row without an ensemble: its central value
        out["answer"] = word
        lo, hi = out["ttft_change_pct_interval"] or (change, change)
        out["text"] = (f"{HEADLINES[word]} on {name}'s scenario: TTFT {change:+.2f}% [{lo:+.2f}%, {hi:+.2f}%, 5-95%] "
                       f"vs HiCache off with every fix on (modeled; the seed measured {key['target']:+.2f}%)")
        if out["net_seconds"] is not None:
            out["text"] += f", net {out['net_seconds']:+.1f} s of prefill-server time"
    out["text"] += f"; readings: {within} within tolerance, {outside} outside"
    if out["readings_not_measured"]:
        out["text"] += f", {out['readings_not_measured']} not measured"
    out["text"] += f" of {len(readings)}"
    if out["readings_loo_total"]:
        out["text"] += (f"; left out of the fit, {out['readings_loo_within']} of {out['readings_loo_total']} "
                        "jointly fitted readings predicted within tolerance")
    return out

