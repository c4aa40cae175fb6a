"""What a command that writes a result folder prints and writes: DIR/NAME.json and its plot, then
the JSON or the human lines on stdout (sweep, ablate)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.common.safe_write import check_targets, write_text


def clean_text(value):
    """`value` with every string made valid Unicode: a file name whose bytes are not UTF-8 holds lone
    surrogates (Python's surrogateescape), which JSON would carry as \\udcXX escapes that strict
    readers refuse; each such byte becomes the text \\xNN instead."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {clean_text(k): clean_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_text(v) for v in value]
    return value


def json_text(value, **kwargs) -> str:
    """json.dumps of `value` with its strings made valid Unicode (clean_text)."""
    return json.dumps(clean_text(value), **kwargs)


def emit_result(result: dict, out: Path | None, name: str, plot, as_json: bool, lines: list[str],
                report: str | None = None, also: tuple[str, ...] = ()) -> None:
    """With `out`: OUT/<name>.json (indented, newline-terminated), `plot(OUT/<name>.png, result)` and
    `report` (a page's text, made by the caller before this writes anything) as OUT/report.html,
    every one of them (and the names in `also`, which `plot` writes too) checked before the first is
    written, so a bad one leaves the previous JSON as it was; then `result` as JSON when `as_json`,
    else `lines`."""
    if out is not None:
        if not out.is_dir():
            out.mkdir(parents=True)
        check_targets([out / f"{name}.json", out / f"{name}.png", *(out / n for n in also),
                       *([out / "report.html"] if report is not None else [])])
        write_text(out / f"{name}.json", json_text(result, indent=2) + "\n")
        plot(out / f"{name}.png", result)
        if report is not None:
            write_text(out / "report.html", report)
    print(json_text(result, indent=2) if as_json else "\n".join(lines))
