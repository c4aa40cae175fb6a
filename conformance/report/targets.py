"""The `targets` of report.json: one row per target of the profile, whatever happened to its test.

Rows come from the files conformance/suites/test_targets.py writes (one per target). A target whose
test did not write one (skipped with the backend, deselected with -k, interrupted) gets a
`not_measured` row saying why, so the report always lists every target of the profile.
"""

from __future__ import annotations

import json
from pathlib import Path

TARGET_TEST = "test_targets::test_target"


def collect(profile, results_dir: str | Path, cases: list[dict]) -> list[dict]:
    """Rows for every target of `profile`, in profile order."""
    if profile is None:
        return []
    results_dir = Path(results_dir)
    by_test = {c["test"]: c for c in cases}
    rows = []
    for t in profile.targets:
        path = results_dir / f"{t.name}.json"
        row = None
        if path.is_file():
            try:
                row = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                row = None
        if row is None:
            case = by_test.get(f"{TARGET_TEST}[{t.name}]")
            if case is None:
                reason = "its test did not run in this session (deselected with -k, or the run stopped early)"
            elif case["outcome"] in ("failed", "error"):
                reason = f"its test {case['outcome']} before a verdict: {case['message'][:300]}"
            else:
                reason = case["message"].removeprefix("Skipped: ") or f"its test {case['outcome']}"
            row = {"name": t.name, "metric": t.metric, "value": None, "target": t.value, "tolerance": t.tolerance,
                   "comparator": t.comparator, "unit": t.unit, "verdict": "not_measured", "basis": "measured",
                   "reason": reason, "source": t.source, "inputs": {}, "details": {}}
        rows.append(row)
    return rows


def counts(rows: list[dict]) -> dict[str, int]:
    """pass / fail / not_measured, and the passes and fails split by basis (measured_pass,
    modeled_pass, measured_fail, modeled_fail): a modeled pass checks the profile, not the backend."""
    out = {"pass": 0, "fail": 0, "not_measured": 0,
           "measured_pass": 0, "modeled_pass": 0, "measured_fail": 0, "modeled_fail": 0}
    for r in rows:
        out[r["verdict"]] = out.get(r["verdict"], 0) + 1
        if r["verdict"] in ("pass", "fail"):
            key = f"{r['basis']}_{r['verdict']}"
            out[key] = out.get(key, 0) + 1
    return out
