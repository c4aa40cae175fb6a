"""What a command that writes a result folder prints and writes: DIR/NAME.json and its plot, then
the JSON or the human lines on stdout (sweep, ablate)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from conformance.common.safe_write import check_target, check_targets, temp_name, write_text


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
    written. The plots are drawn first, into a private folder inside OUT, and moved in only once the
    JSON is written: a plot that fails leaves no file of this run (and no folder it made), the
    previous ones as they were. Then `result` as JSON when `as_json`, else `lines`."""
    if out is not None:
        made = not out.is_dir()
        if made:
            out.mkdir(parents=True)
        pngs = [f"{name}.png", *also]
        try:
            check_targets([out / f"{name}.json", *(out / n for n in pngs),
                           *([out / "report.html"] if report is not None else [])])
            stage = out / temp_name(f"{name}.plots")
            os.mkdir(stage, 0o700)
            try:
                plot(stage / f"{name}.png", result)
                write_text(out / f"{name}.json", json_text(result, indent=2) + "\n")
                for n in pngs:
                    os.replace(check_target(stage / n), check_target(out / n))
            finally:
                shutil.rmtree(stage, ignore_errors=True)
        except BaseException:
            if made:
                with contextlib.suppress(OSError):
                    out.rmdir()  # only when empty: a folder this run made and wrote nothing into
            raise
        if report is not None:
            write_text(out / "report.html", report)
    print(json_text(result, indent=2) if as_json else "\n".join(lines))
