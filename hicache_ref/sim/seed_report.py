"""`hicache ablate --scenario seed` and conform's reading rows: the seed scenario's ladder and readings.

The ladder is hicache_ref.sim.ablate on the scenario's trace and tiers; the readings are
hicache_ref.sim.readings.evaluate over the same replays; the answer is the model's TTFT change
with every fix against HiCache off.
"""

from __future__ import annotations

from hardware_profiles.readings import load_readings
from hicache_ref.sim import spread
from hicache_ref.sim.ablate import ablate
from hicache_ref.sim.plateau import DEFAULT_PLATEAU_GAIN
from hicache_ref.sim.readings import ANSWER_READING, evaluate
from hicache_ref.sim.scenario import Runs
from hicache_ref.sim.seed_scenario import l2_tokens, seed_base, seed_requests, seed_runs


def seed_rows(profile, progress=None, engine=None) -> list[dict]:
    """Every reading of `profile`'s readings file on the seed scenario (see `evaluate`), its replays
    on `engine` (a hicache_ref.engines.Engine, None: the reference; a state it does not run: its
    readings not measured, with the reason);
    [] when the profile names no readings."""
    readings = load_readings(profile)
    if readings is None:
        return []
    return evaluate(profile, readings, seed_runs(readings, seed_requests(), profile, progress, engine))


def seed_ladder(profile, readings, plateau_gain: float | None = None, progress=None, engine=None) -> dict:
    """`hicache ablate --scenario seed`: the fix ladder on the scenario (hicache_ref.sim.ablate) and
    every reading (`evaluate`) over the same replays, with the answer: does HiCache pay off."""
    requests = seed_requests()
    sc = readings.scenario
    base = seed_base(readings, profile).replace(l2_tokens=l2_tokens(sc["l2_gb_per_card"]))
    runs = Runs(base, requests, sc["tp"], engine=engine)
    ensemble = spread.members(profile)
    result = ablate(base.replace(tp=sc["tp"]), requests, plateau_gain if plateau_gain is not None else DEFAULT_PLATEAU_GAIN,
                    progress=progress, profile=profile, runs=runs, ensemble=ensemble)
    rows = evaluate(profile, readings, runs, ensemble)
    by = {r["reading"]: r for r in rows}
    final = by.get(ANSWER_READING)
    change = None if final is None else final["model"]
    # the answer word and intervals of the answer reading (hicache_ref.sim.spread); its TTFT change is the reading's
    priced = {k: (final or {}).get(k) for k in spread.KEYS}
    result.update(readings=rows, scenario=dict(sc, readings_file=str(readings.path), trace="seed_requests()"),
                  answer=dict(priced, ttft_change_pct=change, gain=None if change is None else change < 0,
                              seed_ttft_change_pct=None if final is None else final["seed"],
                              net_seconds=None if final is None else final.get("net_seconds"),
                              readings_within=sum(1 for r in rows if r["within"]), readings_total=len(rows),
                              step=ANSWER_READING))
    return result
