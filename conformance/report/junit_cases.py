"""Every test case of a junit.xml as a record: test id, module, outcome, message, seconds."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.report.run_verdict import module_of


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def read_cases(junit: str | Path) -> list[dict]:
    """[{test, module, name, outcome, message, seconds}] in file order; outcome is one of
    passed, failed, error, skipped, xfailed."""
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        mod = module_of(case.get("classname", ""))
        failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
        if failure is not None:
            outcome, node = "failed", failure
        elif error is not None:
            outcome, node = "error", error
        elif skipped is not None:
            outcome, node = ("xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"), skipped
        else:
            outcome, node = "passed", None
        message = "" if node is None else (node.get("message") or _first_line(node.text))
        try:
            seconds = float(case.get("time", 0) or 0)
        except ValueError:
            seconds = 0.0
        out.append({"test": f"{mod}::{case.get('name')}", "module": mod, "name": case.get("name", ""),
                    "outcome": outcome, "message": message[:2000], "seconds": seconds})
    return out
