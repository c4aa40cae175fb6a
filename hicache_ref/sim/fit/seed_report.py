"""`hicache ablate --scenario seed` and conform's reading rows: the seed scenario's ladder and readings.

The ladder is hicache_ref.sim.ladder.ablate on the scenario's trace and tiers; the readings are
hicache_ref.sim.fit.modeled_readings.evaluate over the same replays, each jointly fitted one with its
leave-one-out prediction (hicache_ref.sim.fit.loo); the answer is the model's TTFT change with every
fix against HiCache off, and the model's score in sample and left out.
"""

from __future__ import annotations

from hardware_profiles.measured_readings import load_readings
from hicache_ref.sim.fit import derivation_cache, loo
from hicache_ref.sim.fit.modeled_readings import ANSWER_READING, evaluate, replay_pairs
from hicache_ref.sim.ladder.ablate import ablate
from hicache_ref.sim.ladder.scenario import Runs
from hicache_ref.sim.ladder.seed_scenario import l2_tokens, seed_base, seed_requests, seed_runs
from hicache_ref.sim.price import spread
from hicache_ref.sim.sweep.plateau import DEFAULT_PLATEAU_GAIN


def with_loo(profile, readings, runs, rows: list[dict]) -> tuple[list[dict], dict]:
    """(`rows` each with `loo_model` and `loo_within`: its leave-one-out prediction, None for a
    reading outside the joint fit; the leave-one-out summary, hicache_ref.sim.fit.loo.cached)."""
    out = loo.cached(profile, readings, runs)
    by = {p["reading"]: p for p in out["predictions"]}
    for r in rows:
        p = by.get(r["reading"])
        r["loo_model"] = None if p is None else p["left_out"]
        r["loo_within"] = None if p is None else p["within"]
    return rows, out


def score(rows: list[dict], out: dict) -> dict:
    """The model's score: readings within tolerance in sample, and left out (of the jointly fitted)."""
    return dict(readings_within=sum(1 for r in rows if r["within"]), readings_total=len(rows),
                readings_loo_within=out["readings_loo_within"], readings_loo_total=out["readings_loo_total"],
                loo_worst=[dict(p) for p in out["worst"]],
                **({"loo_not_measured": out["not_measured"]} if "not_measured" in out else {}))


def seed_rows(profile, progress=None, engine=None) -> list[dict]:
    """Every reading of `profile`'s readings file on the seed scenario (see `evaluate`, and
    `with_loo`), its replays on `engine` (a hicache_ref.engines.LadderEngine, None: the reference; a state
    it does not run: its readings not measured, with the reason); [] when the profile names no readings."""
    readings = load_readings(profile)
    if readings is None:
        return []
    runs = seed_runs(readings, seed_requests(), profile, progress, engine)
    runs.prefetch(replay_pairs(readings))
    return with_loo(profile, readings, runs, evaluate(profile, readings, runs))[0]


def seed_ladder(profile, readings, plateau_gain: float | None = None, progress=None, engine=None) -> dict:
    """`hicache ablate --scenario seed`: the fix ladder on the scenario (hicache_ref.sim.ladder.ablate) and
    every reading (`evaluate`) over the same replays, with the answer: does HiCache pay off."""
    requests = seed_requests()
    sc = readings.scenario
    base = seed_base(readings, profile).replace(l2_tokens=l2_tokens(sc["l2_gb_per_card"]))
    runs = Runs(base, requests, sc["tp"], engine=engine)
    runs.prefetch(replay_pairs(readings))
    if engine is None:  # the ensemble's derivation reuses these replays rather than making its own
        derivation_cache.remember(profile, runs)
    ensemble = spread.members(profile)
    result = ablate(base.replace(tp=sc["tp"]), requests, plateau_gain if plateau_gain is not None else DEFAULT_PLATEAU_GAIN,
                    progress=progress, profile=profile, runs=runs, ensemble=ensemble)
    rows, left_out = with_loo(profile, readings, runs, evaluate(profile, readings, runs, ensemble))
    by = {r["reading"]: r for r in rows}
    final = by.get(ANSWER_READING)
    change = None if final is None else final["model"]
    # the answer word and intervals of the answer reading (hicache_ref.sim.price.spread); its TTFT change is the reading's
    priced = {k: (final or {}).get(k) for k in spread.KEYS}
    result.update(readings=rows, scenario=dict(sc, readings_file=str(readings.path), trace="seed_requests()"),
                  answer=dict(priced, ttft_change_pct=change, gain=None if change is None else change < 0,
                              seed_ttft_change_pct=None if final is None else final["seed"],
                              net_seconds=None if final is None else final.get("net_seconds"),
                              step=ANSWER_READING, **score(rows, left_out)))
    return result


SEED_READINGS = "p800.yaml"  # the packaged readings whose `scenario` is the seed's workload


def seed_workload(profile, plateau_gain: float | None = None, progress=None, engine=None) -> dict:
    """`hicache ablate --scenario seed` on a profile with no readings of its own: the seed's workload
    (the scenario of the packaged P800 readings: its trace, TP, concurrency and tiers) priced with
    `profile`'s mechanisms. No readings rows (they are the P800's measurements); the answer is the
    last priced rung's TTFT change against HiCache off."""
    from importlib import resources
    from pathlib import Path

    from hardware_profiles.measured_readings import build_readings

    entry = resources.files("hardware_profiles") / "readings" / SEED_READINGS
    readings = build_readings(entry.read_text(encoding="utf-8"), Path(str(entry)))
    requests = seed_requests()
    sc = readings.scenario
    base = seed_base(readings, profile).replace(l2_tokens=l2_tokens(sc["l2_gb_per_card"]))
    result = ablate(base.replace(tp=sc["tp"]), requests, plateau_gain if plateau_gain is not None else DEFAULT_PLATEAU_GAIN,
                    progress=progress, profile=profile, runs=Runs(base, requests, sc["tp"], engine=engine),
                    ensemble=spread.members(profile))
    priced = [s for s in result["steps"] if s.get("ttft_change_pct") is not None]
    last = priced[-1] if priced else None
    change = None if last is None else last["ttft_change_pct"]
    result.update(readings=[], scenario=dict(sc, readings_file=str(readings.path), trace="seed_requests()",
                                             priced_with=profile.name),
                  answer=dict(result.get("answer") or {}, ttft_change_pct=change,
                              gain=None if change is None else change < 0,
                              step=None if last is None else last["step"], seed_ttft_change_pct=None,
                              net_seconds=None if last is None else last["net_benefit_seconds"],
                              readings_within=0, readings_total=0))
    return result
