"""pytest plugin `hicache conform` loads into its child: which tests the selection left out.

A -k or -m expression (or --deselect) removes tests before they run, and junit.xml never shows
them, so a run of part of a deciding suite would look like a whole one. This plugin counts,
per test module, the tests deselected, and the tests selected, and writes the counts as JSON to the file named
by $HICACHE_CONFORM_SELECTION once collection ends (under xdist every worker collects the same
items and writes the same counts; the last write wins, atomically).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

SELECTION_ENV = "HICACHE_CONFORM_SELECTION"
_DESELECTED: Counter[str] = Counter()


def _module(item) -> str:
    from conformance.report.run_verdict import module_of

    mod = getattr(item, "module", None)
    return module_of(getattr(mod, "__name__", "") or item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py"))


def pytest_deselected(items) -> None:
    _DESELECTED.update(_module(i) for i in items)


def pytest_collection_finish(session) -> None:
    target = os.environ.get(SELECTION_ENV)
    if not target:
        return
    from conformance.common.safe_write import write_text
    from conformance.report.write_guard import unwritten

    try:
        write_text(Path(target), json.dumps({"deselected": dict(_DESELECTED), "selected": len(session.items)}))
    except (OSError, ValueError) as e:  # a full disk: said once, at the session's end (write_guard)
        unwritten(e)


def _load(path: str | Path) -> dict:
    """The plugin's file as a dict; {} when it wrote none or it cannot be read."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read(path: str | Path) -> dict[str, int] | None:
    """Deselected tests per module from the plugin's file, or None when it wrote none (pytest
    stopped before collection ended)."""
    got = _load(path).get("deselected")
    return {str(k): int(v) for k, v in got.items()} if isinstance(got, dict) else None


def selected(path: str | Path) -> int | None:
    """How many tests the selection kept (each should leave a result in junit.xml), or None when
    the plugin wrote no count."""
    n = _load(path).get("selected")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def unreported(path: str | Path, reported: int) -> str | None:
    """Why the report is short of the selection (pytest-xdist stops after too many workers die, an
    internal error ends the session early), or None when every selected test left a result."""
    n = selected(path)
    if n is None or reported >= n:
        return None
    return f"{n - reported} of {n} selected tests left no result: pytest stopped before they ran"
