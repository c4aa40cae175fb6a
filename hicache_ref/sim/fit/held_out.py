"""Held-out workloads: seed-shaped traces the derivation never saw, priced across the ensemble.

The parameters are derived on one trace (hicache_ref.sim.trace.synth.SEED_WORKLOAD, seed 0, PD
prefill). A model that predicts, not fits, keeps the fix ladder's sign on other draws of the same
workload and with PD on or off: HiCache as first built a loss against HiCache off, with every fix
a gain. Each figure comes with its 5-95% interval over hicache_ref.sim.price.uncertainty.ensemble and
the answer word that interval gives.
"""

from __future__ import annotations

import dataclasses

from hicache_ref.sim.fit import derivation_cache  # noqa: F401  (registers the derivation)
from hicache_ref.sim.fit.modeled_readings import workload_change_pct
from hicache_ref.sim.ladder.scenario import Runs
from hicache_ref.sim.ladder.seed_scenario import seed_base
from hicache_ref.sim.price.uncertainty import answer, central_interval, ensemble

HELD_OUT_SEEDS = (1, 2)  # trace.synth seeds other than the derivation's (0)
LADDER_ENDS = ("first_build", "all_fixes")  # the readings file's states: loss as first built, gain at the end
EXPECTED = {"first_build": "loss", "all_fixes": "gain"}


def held_out(profile, readings, seeds=HELD_OUT_SEEDS, pd=(True, False), requests: int | None = None) -> list[dict]:
    """One row per (trace seed, PD on/off): the TTFT change against HiCache off of each ladder end,
    central (the profile) and its interval over the ensemble, the answer word, and `sign_kept`
    (each end's answer as EXPECTED). `requests`: fewer requests per trace (None: the workload's)."""
    from hicache_ref.sim.trace.synth import SEED_WORKLOAD

    members = ensemble(profile)
    sc, gb = readings.scenario, readings.scenario["l2_gb_per_card"]
    rows = []
    for seed in seeds:
        work = dataclasses.replace(SEED_WORKLOAD, seed=seed, **({"requests": requests} if requests else {}))
        trace = work.synthesize().requests
        for on in pd:
            runs = Runs(seed_base(readings, profile).replace(pd_disagg=on), trace, sc["tp"])
            row = {"trace_seed": seed, "pd_disagg": on, "requests": len(trace)}
            for end in LADDER_ENDS:
                st = readings.states[end]
                values = [workload_change_pct(m, runs, st, gb, readings.states) for m in members]
                iv = central_interval(values)
                row[end] = {"ttft_change_pct": values[0], "ttft_change_pct_interval": list(iv), "answer": answer(iv)}
            row["sign_kept"] = all(row[e]["answer"] == EXPECTED[e] for e in LADDER_ENDS)
            rows.append(row)
    return rows


def main() -> None:  # python -m hicache_ref.sim.fit.held_out [PROFILE]: the held-out table
    import sys

    from hardware_profiles import load_profile
    from hardware_profiles.measured_readings import load_readings

    profile = load_profile(sys.argv[1] if len(sys.argv) > 1 else "p800")
    readings = load_readings(profile)
    if readings is None:
        sys.exit(f"{profile.path}: readings: the profile names no readings file, so it has no seed scenario")
    print("| trace seed | PD | first build: TTFT change (5-95%) | every fix: TTFT change (5-95%) | sign kept |")
    print("| --- | --- | --- | --- | --- |")
    for r in held_out(profile, readings):
        cells = [f"{r[e]['ttft_change_pct']:+.1f}% ({r[e]['ttft_change_pct_interval'][0]:+.1f} to "
                 f"{r[e]['ttft_change_pct_interval'][1]:+.1f}), {r[e]['answer']}" for e in LADDER_ENDS]
        print(f"| {r['trace_seed']} | {'on' if r['pd_disagg'] else 'off'} | {cells[0]} | {cells[1]} | "
              f"{'yes' if r['sign_kept'] else 'NO'} |")


if __name__ == "__main__":
    main()
