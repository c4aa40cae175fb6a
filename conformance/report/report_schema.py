"""The JSON Schema of report.json (draft 2020-12): what scripts reading a conformance report may rely on."""

from __future__ import annotations

SCHEMA_ID = "hicache-conform-report/1"

_NUMBER_OR_NULL = {"type": ["number", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}

# A reading's own row (hicache_ref.sim.fit.modeled_readings.evaluate), kept under a reading row's `reading`
READING = {
    "type": "object",
    "required": ["reading", "seed", "model", "unit", "tolerance", "within", "state", "interpretation"],
    "properties": {
        "reading": {"type": "string"}, "seed": {"type": "number"}, "model": _NUMBER_OR_NULL,
        "unit": {"type": "string"}, "within": {"type": ["boolean", "null"]}, "state": _STR_OR_NULL,
        "interpretation": {"type": "string"},
        "tolerance": {"type": "object", "required": ["kind", "size"],
                      "properties": {"kind": {"enum": ["relative", "points", "exact", "sign"]},
                                     "size": {"type": "number", "minimum": 0}}},
    },
}

TARGET_ROW = {
    "type": "object",
    "required": ["name", "value", "target", "comparator", "unit", "verdict", "basis", "reason", "source"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "kind": {"enum": ["target", "reading"]},  # a profile target, or a reading of its readings file
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
        "reading": READING,
    },
    # a value-less row must say why; a pass or fail has a value, but for a reading the model may
    # give none (its premise unmet): a fail that says why
    "allOf": [
        {"if": {"properties": {"verdict": {"const": "not_measured"}}},
         "then": {"properties": {"value": {"type": "null"}, "reason": {"minLength": 1}}},
         "else": {"if": {"required": ["kind"], "properties": {"kind": {"const": "reading"},
                                                               "verdict": {"const": "fail"}}},
                  "then": {"properties": {"value": _NUMBER_OR_NULL, "reason": {"minLength": 1}}},
                  "else": {"properties": {"value": {"type": "number"}}}}},
    ],
}

# The answer report.json and summary.json open with (conformance.report.answer)
ANSWER = {
    "type": "object",
    "required": ["scenario", "ttft_change_pct", "seed_ttft_change_pct", "gain", "readings_within",
                 "readings_outside", "readings_not_measured", "readings_total", "text"],
    "properties": {
        "scenario": _STR_OR_NULL, "ttft_change_pct": _NUMBER_OR_NULL, "seed_ttft_change_pct": _NUMBER_OR_NULL,
        "gain": {"type": ["boolean", "null"]}, "text": {"type": "string", "minLength": 1},
        "net_seconds": _NUMBER_OR_NULL,  # busy seconds saved vs HiCache off, where the reading's row gives them
        # leave-one-out (conformance.report.answer.left_out): null without jointly fitted readings
        **{k: {"type": ["integer", "null"], "minimum": 0} for k in ("readings_loo_within", "readings_loo_total")},
        **{k: {"type": "array", "items": {"type": "object", "required": ["reading", "seed", "left_out", "within"]}}
           for k in ("loo_predictions", "loo_worst")},
        # the answer word and 5-95% intervals over the parameter ensemble (hicache_ref.sim.price.spread)
        "answer": {"enum": ["gain", "loss", "undecided", None]},
        **{k: {"anyOf": [{"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
                         {"type": "null"}]}
           for k in ("ttft_change_pct_interval", "net_benefit_seconds_interval", "busy_seconds_interval")},
        **{k: {"type": "integer", "minimum": 0}
           for k in ("readings_within", "readings_outside", "readings_not_measured", "readings_total")},
    },
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
    "required": ["schema", "verdict", "ok", "not_run_reason", "answer", "summary", "tests", "targets", "target_counts",
                 "unchecked_targets", "failed_targets", "model_verdict", "failed_readings", "assumptions", "environment",
                 "figures"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "verdict": {"enum": ["PASS", "FAIL", "NOT RUN", "PARTIAL"]},
        "ok": {"type": "boolean"},
        "not_run_reason": _STR_OR_NULL,
        "partial_reason": _STR_OR_NULL,
        "answer": ANSWER,
        # the model's verdict on the profile's seed readings (None: the profile has none); not the node's
        "model_verdict": {"anyOf": [{"enum": ["PASS", "FAIL", "NOT RUN"]}, {"type": "null"}]},
        "failed_readings": {"type": "array", "items": {"type": "string"}},
        "summary": {"type": "object", "required": ["backend", "profile", "verdict", "totals", "modules"],
                    "properties": {"answer": {"anyOf": [ANSWER, {"type": "null"}]}}},
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
