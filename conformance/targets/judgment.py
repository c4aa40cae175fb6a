"""One target's judgment: what a measurer found (Outcome) judged against the target (row).

A row is what report.json lists under `targets`: name, value, target, comparator, unit,
verdict, basis, reason, source (plus metric, tolerance, inputs and details). A value of None is
`not_measured` with the reason, never a pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

JUDGMENTS = ("pass", "fail", "not_measured")  # a row's `verdict` key
BASES = ("measured", "modeled")
ROW_KEYS = ("name", "value", "target", "comparator", "unit", "verdict", "basis", "reason", "source")
# Where the targets suite writes each target's row (one JSON file per target); `hicache conform`
# sets it to OUT/targets, and the report reads the rows back. Unset: rows are not kept.
RESULTS_ENV = "HICACHE_TARGET_RESULTS"


@dataclass(frozen=True)
class Outcome:
    """What a measurer got. basis: 'measured' (on the backend, this run) or 'modeled' (from the
    profile; `inputs` names each profile key used -> its source). reason: why value is None, or
    what the figure rests on."""

    value: float | None
    basis: str
    reason: str = ""
    inputs: dict[str, str] = field(default_factory=dict)
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.basis not in BASES:
            raise ValueError(f"basis: expected one of {', '.join(BASES)}, got {self.basis!r}")
        if self.value is None and not self.reason:
            raise ValueError("reason: an outcome without a value must say why")


def not_measured(basis: str, reason: str, **details) -> Outcome:
    return Outcome(None, basis, reason, details=details)


def model_inputs(profile, *keys: str) -> dict[str, str]:
    """key path -> source for each profile key a modeled figure reads ('unknown' if unsourced)."""
    return {k: profile.sources.get(k, "no source given") for k in keys}


def judge(target, outcome: Outcome) -> dict:
    """The report row of `target` (hardware_profiles.metric_targets.Target) given what was found."""
    value = outcome.value
    if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value)):
        outcome = Outcome(None, outcome.basis, f"measurement gave {value!r}", outcome.inputs, outcome.details)
        value = None
    if value is None:
        judgment = "not_measured"
    else:
        judgment = "pass" if target.check(value) else "fail"
    return {
        "name": target.name, "kind": "target", "metric": target.metric, "value": value, "target": target.value,
        "tolerance": target.tolerance, "comparator": target.comparator, "unit": target.unit,
        "verdict": judgment, "basis": outcome.basis, "reason": outcome.reason, "source": target.source,
        "inputs": dict(outcome.inputs), "details": dict(outcome.details),
    }


def describe(row: dict) -> str:
    """One line for a row: 'name: value unit, target <= x (tolerance t): verdict (basis)'."""
    shown = "-" if row["value"] is None else f"{row['value']:.6g}"
    tol = f" (tolerance {row['tolerance']:g})" if row.get("tolerance") else ""
    why = f": {row['reason']}" if row["reason"] and row["verdict"] != "pass" else ""
    return (f"{row['name']}: {shown} {row['unit']}, target {row['comparator']} {row['target']:g}{tol}: "
            f"{row['verdict']} ({row['basis']}){why}")
