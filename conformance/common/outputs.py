"""What a command that writes a result folder prints and writes: DIR/NAME.json and its plot, then
the JSON or the human lines on stdout (sweep, ablate)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.common.safe_write import write_text


def emit_result(result: dict, out: Path | None, name: str, plot, as_json: bool, lines: list[str],
                report: str | None = None) -> None:
    """With `out`: OUT/<name>.json (indented, newline-terminated), `plot(OUT/<name>.png, result)` and
    `report` (a page's text, made by the caller before this writes anything) as OUT/report.html;
    then `result` as JSON when `as_json`, else `lines`."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / f"{name}.json", json.dumps(result, indent=2) + "\n")
        plot(out / f"{name}.png", result)
        if report is not None:
            write_text(out / "report.html", report)
    print(json.dumps(result, indent=2) if as_json else "\n".join(lines))
