"""The profile's readings (hardware_profiles/readings/) as modeled targets: one report row per
reading, the model's value against the seed's with the reading's tolerance, `pass` or `fail` by
whether it is within, `not_measured` when the profile cannot price it.

The rows come from hicache_ref.sim.fit.seed_report.seed_rows, which replays the seed scenario's trace
(seconds) on the context's engine (`hicache conform --engine`; a state it does not run leaves its
readings not measured, with the reason): they are taken once per conform run, shared through the
results folder by every pytest worker of the run (a file lock), and once per process otherwise.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from conformance.targets.judgment import RESULTS_ENV, model_inputs

KIND = "reading"  # a report row's `kind`; target rows are "target"
FILE_PREFIX = "reading-"  # OUT/targets/reading-<name>.json (a target name has no hyphen)
SHARED_ROWS = "seed-rows.json"  # the run's seed_rows, beside the target rows


def reading_names(profile) -> list[str]:
    """The readings of `profile`'s readings file, in file order ([] when it names none)."""
    from hardware_profiles.measured_readings import load_readings

    readings = None if profile is None else load_readings(profile)
    return [] if readings is None else [r.name for r in readings.readings]


def _computed(profile, engine: str) -> list[dict]:
    from hicache_ref.engines import engine_for
    from hicache_ref.sim.fit.seed_report import seed_rows

    return seed_rows(profile, engine=engine_for(engine))


def _shared(profile, engine: str, folder: Path) -> list[dict]:
    """seed_rows taken by the first worker of the run and read back by the others."""
    path = folder / SHARED_ROWS
    with open(folder / f".{SHARED_ROWS}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if path.is_file():
                kept = json.loads(path.read_text(encoding="utf-8"))
                if kept.get("profile") == str(profile.path) and kept.get("engine", "reference") == engine:
                    return kept["rows"]
            rows = _computed(profile, engine)
            from conformance.common.safe_write import write_text

            write_text(path, json.dumps({"profile": str(profile.path), "engine": engine, "rows": rows}, default=str))
            return rows
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def seed_rows_once(ctx) -> list[dict]:
    """hicache_ref.sim.fit.seed_report.seed_rows of the context's profile, taken once per run."""
    def take():
        folder = os.environ.get(RESULTS_ENV)
        if folder and Path(folder).is_dir():
            return _shared(ctx.profile, ctx.engine, Path(folder))
        return _computed(ctx.profile, ctx.engine)
    return ctx.memo("seed_rows", take)


def absolute_tolerance(seed: float, tolerance: dict) -> float:
    """The tolerance in the reading's unit: a relative one times |seed|, points and exact as given."""
    return tolerance["size"] * abs(seed) if tolerance["kind"] == "relative" else tolerance["size"]


def describe_tolerance(seed: float, tolerance: dict, unit: str) -> str:
    kind, size = tolerance["kind"], tolerance["size"]
    if kind == "relative":
        return f"within {size:.0%} (±{absolute_tolerance(seed, tolerance):.4g} {unit}), sign kept"
    if kind == "points":
        return f"within {size:g} points, sign kept"
    return "exactly" if kind == "exact" else "the same sign"


def _judgment(row: dict) -> str:
    if row["within"] is None:
        return "not_measured"
    return "pass" if row["within"] else "fail"


def _reason(row: dict, verdict: str) -> str:
    unit, state = row["unit"], row["state"] or "no particular state"
    if verdict == "not_measured":
        why = row["not_measured"]
        return why if why.startswith("NOT RUN") else f"the model cannot compute it: {why}"
    tol = describe_tolerance(row["seed"], row["tolerance"], unit)
    model = "no figure (the model does not reach the reading's premise)" if row["model"] is None else \
        f"{row['model']:.4g} {unit}"
    if verdict == "pass":
        return f"model {model} vs seed {row['seed']:g} {unit}, {tol} (state {state})"
    return (f"model {model} vs seed {row['seed']:g} {unit}: outside the tolerance ({tol}); state {state}; "
            f"read as: {row['interpretation']}")


def report_row(row: dict, profile, source: str) -> dict:
    """The report row of one seed row (hicache_ref.sim.fit.modeled_readings.evaluate), shaped like a target's
    (conformance.targets.judgment.judge) with kind "reading" and the seed row under `reading`."""
    verdict = _judgment(row)
    return {
        "name": row["reading"], "kind": KIND, "metric": f"reading.{row['quantity']}",
        "value": row["model"] if verdict != "not_measured" else None, "target": row["seed"],
        "tolerance": absolute_tolerance(row["seed"], row["tolerance"]), "comparator": "==", "unit": row["unit"],
        "verdict": verdict, "basis": "modeled", "reason": _reason(row, verdict),
        "source": f"{source}: {row['measured']}", "inputs": model_inputs(profile, *row.get("derives") or ()),
        "details": {}, "reading": dict(row),
    }


def reading_rows(ctx) -> dict[str, dict]:
    """name -> report row of every reading of the context's profile."""
    from hardware_profiles.measured_readings import load_readings

    readings = load_readings(ctx.profile)
    if readings is None:
        return {}
    return {r["reading"]: report_row(r, ctx.profile, readings.source) for r in seed_rows_once(ctx)}
