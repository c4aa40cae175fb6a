"""The JSON Schema of report.json (draft 2020-12): what scripts reading a conformance report may rely on."""

from __future__ import annotations

SCHEMA_ID = "hicache-conform-report/1"

_NUMBER_OR_NULL = {"type": ["number", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}

TARGET_ROW = {
    "type": "object",
    "required": ["name", "value", "target", "comparator", "unit", "verdict", "basis", "reason", "source"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "metric": {"type": "string"},
        "value": _NUMBER_OR_NULL,
        "target": {"type": "number"},
        "tolerance": {"type": "number", "minimum": 0},
        "comparator": {"enum": ["<=", ">=", "<", ">", "=="]},
        "unit": {"type": "string"},
        "verdict": {"enum": ["pass", "fail", "not_measured"]},
        "basis": {"enum": ["measured", "modeled"]},
        "reason": {"type": "string"},
        "source": {"type": "string", "minLength": 1},
        "inputs": {"type": "object", "additionalProperties": {"type": "string"}},
        "details": {"type": "object"},
    },
    # a value-less row must say why; a pass or fail has a value
    "allOf": [
        {"if": {"properties": {"verdict": {"const": "not_measured"}}},
         "then": {"properties": {"value": {"type": "null"}, "reason": {"minLength": 1}}},
         "else": {"properties": {"value": {"type": "number"}}}},
    ],
}

TEST_CASE = {
    "type": "object",
    "required": ["test", "module", "outcome", "message", "seconds"],
    "properties": {
        "test": {"type": "string"}, "module": {"type": "string"}, "name": {"type": "string"},
        "outcome": {"enum": ["passed", "failed", "error", "skipped", "xfailed"]},
        "message": {"type": "string"}, "seconds": {"type": "number", "minimum": 0},
    },
}

REPORT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "type": "object",
    "required": ["schema", "verdict", "ok", "not_run_reason", "summary", "tests", "targets", "target_counts",
                 "unchecked_targets", "failed_targets", "assumptions", "environment", "figures"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "verdict": {"enum": ["PASS", "FAIL", "NOT RUN", "PARTIAL"]},
        "ok": {"type": "boolean"},
        "not_run_reason": _STR_OR_NULL,
        "partial_reason": _STR_OR_NULL,
        "summary": {"type": "object", "required": ["backend", "profile", "verdict", "totals", "modules"]},
        "tests": {"type": "array", "items": TEST_CASE},
        "targets": {"type": "array", "items": TARGET_ROW},
        "target_counts": {"type": "object", "required": ["pass", "fail", "not_measured"],
                          "additionalProperties": {"type": "integer", "minimum": 0}},
        "unchecked_targets": {"type": "array", "items": {"type": "string"}},
        "failed_targets": {"type": "array", "items": {"type": "string"}},
        "assumptions": {"type": "object", "additionalProperties": {"type": "string"}},
        "environment": {
            "type": "object",
            "required": ["backend", "profile", "host", "cpu", "kernel", "torch", "topology", "doctor"],
            "properties": {"backend": {"type": "string"}, "profile": _STR_OR_NULL, "host": {"type": "string"},
                           "cpu": {"type": "string"}, "kernel": {"type": "string"}, "torch": {"type": "string"},
                           "topology": {"type": ["object", "null"]}, "doctor": {"type": "object"}},
        },
        "figures": {"type": "object", "required": ["allhit", "bandwidth", "layouts", "calibration"]},
        "generated_at": {"type": "string"},
    },
}


def validate(report: dict) -> None:
    """Raise jsonschema.ValidationError when `report` does not match (jsonschema: the test extra)."""
    import jsonschema

    jsonschema.validate(report, REPORT)
