"""Reading one profile leaf: a bare value, `unknown`, or {value, source, range | stderr}, checked by its Bound.

LeafReader walks a parsed profile once (hardware_profiles.profile_schema reads each section with
it): it refuses unknown keys, requires a source beside each known value that must say where it
comes from, checks a stated uncertainty (a range around an assumed value, a stderr beside a
measured one), and records sources, ranges and stderrs by key path for the Profile.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

from hardware_profiles.field_checks import Bound, FieldError, ProfileError
from hardware_profiles.profile import UNKNOWN
from hardware_profiles.strict_yaml import join_path, shown
from hardware_profiles.values import is_number

MISSING = "no value (the key is missing)"


class LeafReader:
    """Walks the parsed YAML once, checking every key, and records each value's source."""

    def __init__(self, file: str):
        self.file = file
        self.sources: dict[str, str] = {}
        self.ranges: dict[str, tuple[float, float]] = {}
        self.stderrs: dict[str, float] = {}

    def fail(self, key_path: str, expected: str, got: str) -> NoReturn:
        raise ProfileError(self.file, key_path, expected, got)

    def section(self, data: Any, path: str, keys: tuple[str, ...]) -> dict:
        """A mapping whose keys are all among `keys` (presence is checked as each is read)."""
        if not isinstance(data, dict):
            self.fail(path or "(document)", f"a mapping with keys {', '.join(keys)}", shown(data))
        for key in data:
            if key not in keys:
                self.fail(join_path(path, key), f"one of the keys {', '.join(keys)}", f"unknown key {key!r}")
        return data

    def leaf(self, parent: dict, key: str, path: str, expected: str, sourced: bool) -> tuple[Any, str]:
        """(raw value, its key path): a bare value, `unknown`, or {value: ..., source: ...}.

        `sourced` leaves (link and compute numbers) must say where a known value comes from.
        """
        p = join_path(path, key)
        if key not in parent:
            self.fail(p, expected, MISSING)
        raw = parent[key]
        if isinstance(raw, dict):
            self.section(raw, p, ("value", "source", "range", "stderr"))
            if "value" not in raw:
                self.fail(f"{p}.value", expected, MISSING)
            source = raw.get("source")
            if not isinstance(source, str) or not source.strip():
                self.fail(f"{p}.source", "a non-empty string saying where the value comes from",
                          MISSING if "source" not in raw else shown(source))
            self.sources[p] = source.strip()
            self.spread(raw, p)
            return raw["value"], f"{p}.value"
        if sourced and raw != UNKNOWN:
            self.fail(p, f"{{value: <{expected}>, source: <where it comes from>}} or 'unknown'", shown(raw))
        return raw, p

    def spread(self, raw: dict, p: str) -> None:
        """A value's stated uncertainty: `range: [low, high]` around an assumed value (low <= value <=
        high, low < high), or `stderr:` (> 0) of a measured one; the value's own bound is checked
        with the value (`bounded`), so a range outside it fails there."""
        assumed = str(raw["source"]).strip().lower().startswith("assumed")
        value = raw["value"]
        if "range" in raw:
            r = raw["range"]
            ok = (isinstance(r, list) and len(r) == 2 and all(is_number(x) and math.isfinite(x) for x in r)
                  and r[0] < r[1])
            if not ok:
                self.fail(f"{p}.range", "[low, high]: two finite numbers, low below high", shown(r))
            if not assumed:
                self.fail(f"{p}.range", "a range only beside an assumed value (source 'assumed: ...'); "
                          "a measured value states its stderr", shown(r))
            if is_number(value) and not r[0] <= value <= r[1]:
                self.fail(f"{p}.range", f"a range that holds the value {value!r}", shown(r))
            self.ranges[p] = (float(r[0]), float(r[1]))
        if "stderr" in raw:
            e = raw["stderr"]
            if not is_number(e) or not math.isfinite(e) or e < 0:
                self.fail(f"{p}.stderr", "a non-negative number (the value's standard error, its unit)", shown(e))
            if assumed:
                self.fail(f"{p}.stderr", "a stderr only beside a measured value; an assumed one states "
                          "its range", shown(e))
            self.stderrs[p] = float(e)

    def number(self, parent, key, path, unit, lo, hi, *, integer=False, lo_open=False, sourced=False):
        return self.bounded(parent, key, path, Bound(unit, lo, hi, integer, lo_open), sourced)

    def bounded(self, parent, key, path, bound: Bound, sourced=False):
        """A number checked by `bound` (the check the dataclasses run too), or None for unknown."""
        raw, p = self.leaf(parent, key, path, bound.expected(), sourced)
        if raw == UNKNOWN:
            return None
        try:
            out = bound.check(key, raw)
            spread = self.ranges.get(join_path(path, key))
            if spread is not None:  # the range's ends must be values the key may take
                at = f"{join_path(path, key)}.range"
                for end in spread:
                    try:
                        bound.check(key, end)
                    except FieldError as e:
                        self.fail(at, e.expected, shown(list(spread)))
            return out
        except FieldError as e:
            self.fail(p, e.expected, e.got)

    def text(self, parent, key, path, *, may_be_unknown=True) -> str | None:
        expected = "a non-empty string" + (" or 'unknown'" if may_be_unknown else "")
        raw, p = self.leaf(parent, key, path, expected, False)
        if may_be_unknown and raw == UNKNOWN:
            return None
        if not isinstance(raw, str) or not raw.strip():
            self.fail(p, expected, shown(raw))
        return raw.strip()
