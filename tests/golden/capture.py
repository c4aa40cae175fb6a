"""Rewrite the pinned figures: `python tests/golden/capture.py [NAME ...]` (all cases by default)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run as a script: the checkout, where `tests.golden` is

from hicache_ref.sim.trace import find_trace  # noqa: E402
from tests.golden.cases import CASES, CONFORM_DETERMINISTIC, CONFORM_TARGETS  # noqa: E402


def run_case(name: str) -> dict:
    argv, trace = CASES[name]
    cmd = ["hicache", *argv, "--trace", str(find_trace(trace)), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def conform_targets() -> dict:
    """Name -> (basis, verdict, value) of every target; value and verdict only where the model decides."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["hicache", *CONFORM_TARGETS, "--out", f"{tmp}/out"], capture_output=True, check=False)
        doc = json.loads(open(f"{tmp}/out/report.json").read())
    out = {}
    for t in doc["targets"]:
        decided = t["basis"] == "modeled" or t["name"].startswith(CONFORM_DETERMINISTIC)
        out[t["name"]] = dict(basis=t["basis"], **({"verdict": t["verdict"], "value": t["value"]} if decided else {}))
    return out


def main(names: list[str]) -> None:
    if not names or "conform_targets" in names:
        (HERE / "conform_targets.json").write_text(json.dumps(conform_targets(), indent=1, sort_keys=True) + "\n")
        names = [n for n in names if n != "conform_targets"]
        if not names and sys.argv[1:]:
            return
    for name in names or sorted(CASES):
        (HERE / f"{name}.json").write_text(json.dumps(run_case(name), indent=1, sort_keys=True) + "\n")
        print(name, file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
