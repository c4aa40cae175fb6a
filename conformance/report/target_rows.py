"""The `targets` of report.json: one row per target of the profile and one per reading of its
readings file (kind "target" / "reading"), whatever happened to their tests.

Rows come from the files conformance/suites/test_targets.py writes (one per target or reading). One
whose test did not write it (skipped with the backend, deselected with -k, interrupted) gets a
`not_measured` row saying why, so the report always lists every target and reading of the profile.
"""

from __future__ import annotations

import json
from pathlib import Path

TARGET_TEST = "test_targets::test_target"
READING_TEST = "test_targets::test_reading"


def _kept(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _why_missing(case: dict | None) -> str:
    if case is None:
        return "its test did not run in this session (deselected with -k, or the run stopped early)"
    if case["outcome"] in ("failed", "error"):
        return f"its test {case['outcome']} before a verdict: {case['message'][:300]}"
    return case["message"].removeprefix("Skipped: ") or f"its test {case['outcome']}"


def collect(profile, results_dir: str | Path, cases: list[dict]) -> list[dict]:
    """Rows for every target of `profile`, in profile order, then every reading, in file order."""
    if profile is None:
        return []
    results_dir = Path(results_dir)
    by_test = {c["test"]: c for c in cases}
    rows = []
    for t in profile.targets:
        row = _kept(results_dir / f"{t.name}.json")
        if row is None:
            row = {"name": t.name, "kind": "target", "metric": t.metric, "value": None, "target": t.value,
                   "tolerance": t.tolerance, "comparator": t.comparator, "unit": t.unit, "verdict": "not_measured",
                   "basis": "measured", "reason": _why_missing(by_test.get(f"{TARGET_TEST}[{t.name}]")),
                   "source": t.source, "inputs": {}, "details": {}}
        rows.append(row)
    return rows + reading_rows(profile, results_dir, by_test)


def reading_rows(profile, results_dir: Path, by_test: dict) -> list[dict]:
    """The kept row of each reading of the profile, or a not_measured one saying why there is none."""
    from conformance.targets import reading_rows as reading_targets
    from hardware_profiles.measured_readings import load_readings
    from hicache_ref.sim.fit.modeled_readings import tolerance

    try:
        readings = load_readings(profile)
    except (ValueError, OSError):
        return []  # the suite's test_reading[readings_unreadable] failed with the file's error
    rows = []
    for r in readings.readings if readings is not None else ():
        row = _kept(results_dir / f"{reading_targets.FILE_PREFIX}{r.name}.json")
        if row is None:
            kind, size = tolerance(r)
            row = {"name": r.name, "kind": reading_targets.KIND, "metric": f"reading.{r.quantity}", "value": None,
                   "target": r.value, "tolerance": reading_targets.absolute_tolerance(r.value, {"kind": kind, "size": size}),
                   "comparator": "==", "unit": r.unit, "verdict": "not_measured", "basis": "modeled",
                   "reason": _why_missing(by_test.get(f"{READING_TEST}[{r.name}]")),
                   "source": f"{readings.source}: {r.measured}", "inputs": {}, "details": {},
                   "reading": {"reading": r.name, "seed": r.value, "model": None, "unit": r.unit,
                               "tolerance": {"kind": kind, "size": size}, "within": None, "state": r.state,
                               "interpretation": r.interpretation, "measured": r.measured,
                               "quantity": r.quantity, "derives": list(r.derives), "not_measured": None}}
        rows.append(row)
    return rows


def counts(rows: list[dict]) -> dict[str, int]:
    """pass / fail / not_measured, the passes and fails split by basis (measured_pass, modeled_pass,
    measured_fail, modeled_fail): a modeled pass checks the profile, not the backend; and the
    readings apart (reading_pass, reading_fail, reading_not_measured; also counted as modeled)."""
    out = {"pass": 0, "fail": 0, "not_measured": 0,
           "measured_pass": 0, "modeled_pass": 0, "measured_fail": 0, "modeled_fail": 0,
           "reading_pass": 0, "reading_fail": 0, "reading_not_measured": 0}
    for r in rows:
        out[r["verdict"]] = out.get(r["verdict"], 0) + 1
        if r["verdict"] in ("pass", "fail"):
            key = f"{r['basis']}_{r['verdict']}"
            out[key] = out.get(key, 0) + 1
        if r.get("kind") == "reading":
            out[f"reading_{r['verdict']}"] += 1
    return out


def split_counts(report: dict) -> tuple[dict[str, int], dict[str, int]]:
    """(targets, readings) of report.json's target_counts: each {measured_pass, modeled_pass, fail,
    not_measured, total}; a reading is modeled, so its passes are modeled passes."""
    c, rows = report["target_counts"], report["targets"]
    r = {"measured_pass": 0, "modeled_pass": c.get("reading_pass", 0), "fail": c.get("reading_fail", 0),
         "not_measured": c.get("reading_not_measured", 0)}
    r["total"] = r["modeled_pass"] + r["fail"] + r["not_measured"]
    t = {"measured_pass": c.get("measured_pass", 0), "modeled_pass": c.get("modeled_pass", 0) - r["modeled_pass"],
         "fail": c["fail"] - r["fail"], "not_measured": c["not_measured"] - r["not_measured"]}
    t["total"] = len(rows) - r["total"]
    return t, r
