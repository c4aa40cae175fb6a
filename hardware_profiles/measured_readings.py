"""A profile's measured readings (hardware_profiles/readings/<name>.yaml): what was measured, in
which state of the fix ladder, the value, its unit and how the project reads it.

Schema-checked like the profiles: every error names the file and the key path. The model that
computes each reading: hicache_ref/sim/fit/modeled_readings.py. The schema: hardware_profiles/README.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from hardware_profiles.field_checks import (
    COMPUTE_BOUNDS,
    COMPUTE_OPTIONAL_BOUNDS,
    HOST_COST_BOUNDS,
    KERNEL_BOUNDS,
    LINK_BOUNDS,
    ProfileError,
)
from hardware_profiles.strict_yaml import fail, mapping, parse_document, yaml_text
from hardware_profiles.values import is_int, is_number

SCHEMA_VERSION = 1
# quantity -> its unit (a reading of a quantity must use this unit)
QUANTITIES = {
    "first_request_ttft": "s", "d2h_submission": "s", "nonhit_ttft_change": "%",
    "workload_ttft_change": "%", "workload_hit_rate": "%", "plateau_ttft_change": "sign",
    "allhit_intercept": "ms", "allhit_slope": "us/token", "deployment_floor": "ms", "h2d_gbps": "GB/s",
    "break_even_tokens": "tokens", "seed_segments": "segments", "ghost_entry_bytes": "B",
}
# state switch -> allowed values (absent: the first build's value, the first listed)
SWITCHES = {
    "hicache": (True, False), "host_layout": ("page_first_direct", "layer_first"),
    "submission": ("inline", "daemon"), "host_pages": ("4k", "thp"), "numa": ("remote", "local", "interleave", "one_to_one"),
    "ido": (False, True), "hit_count": ("per_insert", "per_request"), "ghost": (False, True),
    "tp_shared": (False, True),
}
SCENARIO_KEYS = {"description": str, "tp": int, "concurrency": int, "pd_disagg": bool, "l1_tokens": int,
                 "l2_gb_per_card": float, "first_request_tokens": int, "chunk_tokens": int, "interpretation": str}
# the profile parameters a reading may derive
PROFILE_KEYS = frozenset([*(f"compute.{k}" for k in (*COMPUTE_BOUNDS, *COMPUTE_OPTIONAL_BOUNDS)),
                          *(f"link.{k}" for k in (*LINK_BOUNDS, *KERNEL_BOUNDS)),
                          *(f"host_costs.{k}" for k in HOST_COST_BOUNDS)])
READING_KEYS = ("measured", "quantity", "state", "value", "unit", "interpretation", "derives", "l2_gb_per_card",
                "host_layout")


@dataclass(frozen=True)
class Reading:
    name: str
    measured: str
    quantity: str
    value: float
    unit: str
    interpretation: str
    state: str | None = None
    derives: tuple[str, ...] = ()
    l2_gb_per_card: float | None = None  # overrides the scenario's L2 for this reading
    host_layout: str | None = None  # seed_segments only


@dataclass(frozen=True)
class Readings:
    profile: str
    path: Path
    source: str
    scenario: dict
    states: dict[str, dict]  # name -> every switch resolved
    readings: tuple[Reading, ...] = field(default=())

    def reading(self, name: str) -> Reading:
        for r in self.readings:
            if r.name == name:
                return r
        raise KeyError(f"{self.path}: no reading {name!r}; readings: {', '.join(r.name for r in self.readings)}")


# The profile reader's own checks (hardware_profiles.strict_yaml): one YAML reader, one way to echo a value.
_fail, _mapping = fail, mapping


def _state(file, name, raw) -> dict:
    raw = _mapping(file, f"states.{name}", raw, SWITCHES)  # {} is the first build; a bare key is a mistake
    out = {}
    for k, allowed in SWITCHES.items():
        v = raw.get(k, allowed[0])
        if v not in allowed or type(v) is not type(allowed[0]):
            _fail(file, f"states.{name}.{k}", f"one of {', '.join(map(str, allowed))}", v)
        out[k] = v
    return out


def _reading(file, name, raw, states) -> Reading:
    key = f"readings.{name}"
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        _fail(file, key, "a snake_case reading name", name)
    raw = _mapping(file, key, raw, READING_KEYS)
    for k in ("measured", "quantity", "value", "unit", "interpretation"):
        if k not in raw:
            _fail(file, f"{key}.{k}", f"a '{k}' entry", "(missing)")
    q = raw["quantity"]
    if q not in QUANTITIES:
        _fail(file, f"{key}.quantity", f"one of {', '.join(QUANTITIES)}", q)
    if raw["unit"] != QUANTITIES[q]:
        _fail(file, f"{key}.unit", f"{QUANTITIES[q]!r} (the unit of {q})", raw["unit"])
    v = raw["value"]
    if not is_number(v) or not math.isfinite(v):
        _fail(file, f"{key}.value", f"a finite number of {raw['unit']}", v)
    for k in ("measured", "interpretation"):
        if not isinstance(raw[k], str) or not raw[k].strip():
            _fail(file, f"{key}.{k}", "a non-empty string", raw[k])
    state = raw.get("state")
    if state is not None and state not in states:
        _fail(file, f"{key}.state", f"a state of `states` ({', '.join(states)})", state)
    derives = raw.get("derives", [])
    if not isinstance(derives, list) or not all(isinstance(d, str) and d in PROFILE_KEYS for d in derives):
        bad = next((d for d in derives if d not in PROFILE_KEYS), derives) if isinstance(derives, list) else derives
        _fail(file, f"{key}.derives", "a list of profile keys (section.key of compute, link or host_costs)", bad)
    if raw["unit"] == "sign" and v not in (-1, 1):
        _fail(file, f"{key}.value", "-1 or 1 (a sign reading)", v)
    gb = raw.get("l2_gb_per_card")
    if gb is not None and (not is_number(gb) or gb <= 0):
        _fail(file, f"{key}.l2_gb_per_card", "a positive number of GB", gb)
    layout = raw.get("host_layout")
    if layout is not None and layout not in SWITCHES["host_layout"]:
        _fail(file, f"{key}.host_layout", f"one of {', '.join(SWITCHES['host_layout'])}", layout)
    return Reading(name, raw["measured"].strip(), q, float(v), raw["unit"], " ".join(raw["interpretation"].split()),
                   state, tuple(derives), None if gb is None else float(gb), layout)


def build_readings(text: str, path: Path) -> Readings:
    data = _mapping(path, "", parse_document(text, str(path)), ("schema", "profile", "source", "scenario", "states", "readings"))
    for k in ("schema", "profile", "source", "scenario", "states", "readings"):
        if k not in data:
            _fail(path, k, f"a '{k}' entry", "(missing)")
    if not is_int(data["schema"]) or data["schema"] != SCHEMA_VERSION:
        _fail(path, "schema", str(SCHEMA_VERSION), data["schema"])
    sc = _mapping(path, "scenario", data["scenario"], SCENARIO_KEYS)
    for k, kind in SCENARIO_KEYS.items():
        v = sc.get(k)
        ok = (isinstance(v, str) and v.strip()) if kind is str else (
            isinstance(v, bool) if kind is bool else (is_int(v) and v > 0) if kind is int else (is_number(v) and v > 0))
        if not ok:
            _fail(path, f"scenario.{k}", f"a {'positive ' if kind in (int, float) else ''}{kind.__name__}", v)
    states = {n: _state(path, n, s) for n, s in _mapping(path, "states", data["states"]).items()}
    readings = tuple(_reading(path, n, r, states) for n, r in _mapping(path, "readings", data["readings"]).items())
    return Readings(str(data["profile"]), path, str(data["source"]), dict(sc), states, readings)


def load_readings(profile) -> Readings | None:
    """The readings file a profile names (`readings:`), beside it in readings/; None when it names none."""
    if profile.readings is None:
        return None
    local = Path(profile.path).parent / "readings" / profile.readings
    if local.is_file():
        out = build_readings(yaml_text(local), local)
    else:
        entry = resources.files("hardware_profiles") / "readings" / profile.readings
        if not entry.is_file():
            raise ProfileError(str(profile.path), "readings", "a file in readings/ beside the profile or in "
                               "hardware_profiles/readings/", profile.readings)
        out = build_readings(entry.read_text(encoding="utf-8"), Path(str(entry)))
    # a copy of a packaged profile keeps its readings; a readings file written for another machine does not fit
    if out.profile not in (profile.name, Path(profile.readings).stem):
        raise ProfileError(str(out.path), "profile", f"{profile.name!r} (the profile that names this file)", out.profile)
    return out
