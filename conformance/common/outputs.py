"""What a command that writes a result folder prints and writes: DIR/NAME.json and its plot, then
the JSON or the human lines on stdout (sweep, ablate)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.common.safe_write import check_targets, write_text


def emit_result(result: dict, out: Path | None, name: str, plot, as_json: bool, lines: list[str],
                also: tuple[str, ...] = ()) -> None:
    """With `out`: OUT/<name>.json (indented, newline-terminated) and `plot(OUT/<name>.png, result)`,
    every one of them (and the names in `also`, which `plot` writes too) checked before the first is
    written, so a bad one leaves the previous JSON as it was; then `result` as JSON when `as_json`,
    else `lines`."""
    if out is not None:
        if not out.is_dir():
            out.mkdir(parents=True)
        check_targets([out / f"{name}.json", out / f"{name}.png", *(out / n for n in also)])
        write_text(out / f"{name}.json", json.dumps(result, indent=2) + "\n")
        plot(out / f"{name}.png", result)
    print(json.dumps(result, indent=2) if as_json else "\n".join(lines))
