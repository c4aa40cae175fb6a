"""Strict reading of a profile's YAML: every key checked, every error naming file, key path and expectation.

One YAML reader for profiles and their readings files (hardware_profiles.measured_readings): aliases are
refused on the node graph, before anything is built from it (an alias bomb of a few KB would
expand to gigabytes), and a bad value is echoed through `shown`, which formats at most a few
dozen characters of it however large it is.
"""

from __future__ import annotations

import math
import re
import reprlib
from pathlib import Path
from typing import Any, NoReturn

import yaml

from hardware_profiles.bounded import MAX_SCALAR_CHARS, MAX_YAML_BYTES, BoundError, read_regular
from hardware_profiles.cost_models import ComputeModel, HostCosts, L3LinkModel, LinkModel
from hardware_profiles.field_checks import (
    COMPUTE_BOUNDS,
    COMPUTE_OPTIONAL_BOUNDS,
    DEVICE_OPTIONAL_BOUNDS,
    HOST_COST_BOUNDS,
    KERNEL_BOUNDS,
    L3_LINK_BOUNDS,
    LINK_BOUNDS,
    Bound,
    FieldError,
    ProfileError,
)
from hardware_profiles.metric_targets import COMPARATORS, METRICS, Target
from hardware_profiles.profile import (
    IDO_STATES,
    SCHEMA_VERSION,
    UNKNOWN,
    DeviceSpec,
    HostSpec,
    Profile,
    TopologySpec,
)
from hardware_profiles.values import is_int, is_number


class _StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that also reads exponent floats like 1e-6 (PyYAML's YAML 1.1 rules make them strings)."""


_StrictSafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 2, 4, 4, 4, 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 80
_SHOWN_CHARS = 80


def shown(value: Any) -> str:
    """`value` as an error echoes it: a repr bounded while it is made (never the whole of a huge
    value), on one line, at most _SHOWN_CHARS characters."""
    if isinstance(value, str) and len(value) > _SHOWN_CHARS // 2:  # its head, and how long it was
        return f"{' '.join(repr(value[: _SHOWN_CHARS // 2]).split())[:-1]}...' ({len(value):,} characters)"
    text = " ".join(_REPR.repr(value).split())
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def fail(file, key_path: str, expected: str, got: Any) -> NoReturn:
    """Raise the ProfileError for `got` at `key_path` of `file` (echoed through `shown`)."""
    raise ProfileError(str(file), key_path, expected, shown(got))


def mapping(file, key_path: str, value: Any, allowed=None) -> dict:
    """`value` when it is a mapping whose keys are all in `allowed` (None: any); ProfileError otherwise."""
    if not isinstance(value, dict):
        fail(file, key_path or "(document)", "a mapping", value)
    if allowed is not None:
        for k in value:
            if k not in allowed:
                fail(file, _join(key_path, k), f"one of the keys {', '.join(allowed)}", k)
    return value


def yaml_text(path: Path) -> str:
    """A profile's or readings file's text: a regular file of at most MAX_YAML_BYTES, UTF-8;
    ProfileError naming the file otherwise (a FIFO, a device, /dev/zero, a file of gigabytes)."""
    try:
        data = read_regular(path, MAX_YAML_BYTES, "YAML")
    except BoundError as e:
        raise ProfileError(str(path), "(file)", f"a regular YAML file of at most {MAX_YAML_BYTES >> 20} MiB",
                           str(e).removeprefix(f"{path}: ")) from None
    except OSError as e:
        raise ProfileError(str(path), "(file)", "a readable YAML file", e.strerror or str(e)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProfileError(str(path), "(file)", "UTF-8 text", f"a byte that is not UTF-8 at offset {e.start}") from None


def _parse(text: str, file: str) -> Any:
    """The one YAML document of `text`, checked for duplicate keys and aliases before it is built."""
    loader = _StrictSafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ProfileError(file, "(document)", "a mapping of profile sections", "an empty file")
        _reject_duplicate_keys(node, "", file)
        return loader.construct_document(node)
    except RecursionError:  # `[[[[...` thousands deep: composing it recurses past Python's stack
        raise ProfileError(file, "(yaml)", f"nesting at most {MAX_DEPTH} levels deep", "deeper nesting") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"(yaml, line {mark.line + 1})" if mark else "(yaml)"
        raise ProfileError(file, where, "valid YAML", shown(getattr(e, "problem", None) or str(e))) from None
    finally:
        loader.dispose()


MAX_DEPTH = 32  # levels of nesting a profile or readings file may use (they use four or five)
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _reject_duplicate_keys(node: yaml.Node, path: str, file: str, walked: set[int] | None = None,
                           depth: int = 0) -> None:
    # safe_load keeps the last of two equal keys silently; in a profile that hides a typo'd edit.
    # A node reached twice is an alias (*name) of an anchor: refused, so nothing is ever expanded.
    # A number of thousands of digits is refused here, by its length, before int() is asked to read it.
    walked = set() if walked is None else walked
    if depth > MAX_DEPTH:
        raise ProfileError(file, path or "(document)", f"nesting at most {MAX_DEPTH} levels deep", "deeper nesting")
    if isinstance(node, yaml.ScalarNode) and node.tag in _NUMBER_TAGS and len(node.value) > MAX_SCALAR_CHARS:
        raise ProfileError(file, path or "(document)", f"a number of at most {MAX_SCALAR_CHARS} characters",
                           f"{len(node.value):,} characters")
    if id(node) in walked:
        raise ProfileError(file, path or "(document)", "a value written out (YAML aliases are not read)",
                           f"an alias of the anchor at line {node.start_mark.line + 1}")
    walked.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                raise ProfileError(file, _join(path, key), "each key once",
                                   f"a second {key!r} at line {key_node.start_mark.line + 1}")
            seen.add(key)
            _reject_duplicate_keys(key_node, _join(path, key), file, walked, depth + 1)
            _reject_duplicate_keys(value_node, _join(path, key), file, walked, depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _reject_duplicate_keys(item, f"{path}[{i}]", file, walked, depth + 1)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def build(text: str, path: Path) -> Profile:
    """Parse and validate one profile's YAML text; errors name `path` and the key path."""
    return _Reader(str(path)).profile(_parse(text, str(path)), path)


_MISSING = "no value (the key is missing)"


class _Reader:
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
                self.fail(_join(path, key), f"one of the keys {', '.join(keys)}", f"unknown key {key!r}")
        return data

    def leaf(self, parent: dict, key: str, path: str, expected: str, sourced: bool) -> tuple[Any, str]:
        """(raw value, its key path): a bare value, `unknown`, or {value: ..., source: ...}.

        `sourced` leaves (link and compute numbers) must say where a known value comes from.
        """
        p = _join(path, key)
        if key not in parent:
            self.fail(p, expected, _MISSING)
        raw = parent[key]
        if isinstance(raw, dict):
            self.section(raw, p, ("value", "source", "range", "stderr"))
            if "value" not in raw:
                self.fail(f"{p}.value", expected, _MISSING)
            source = raw.get("source")
            if not isinstance(source, str) or not source.strip():
                self.fail(f"{p}.source", "a non-empty string saying where the value comes from",
                          _MISSING if "source" not in raw else shown(source))
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
            spread = self.ranges.get(_join(path, key))
            if spread is not None:  # the range's ends must be values the key may take
                at = f"{_join(path, key)}.range"
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

    # -- sections ----------------------------------------------------------------------------

    def profile(self, data: Any, path: Path) -> Profile:
        top = self.section(data, "", ("schema", "description", "device", "host", "topology",
                                      "link", "compute", "host_costs", "l3_link", "readings",
                                      "targets"))
        for key in ("schema", "description", "device", "host", "link", "compute", "targets"):
            if key not in top:
                self.fail(key, f"a '{key}' entry (see hardware_profiles/README.md)", _MISSING)
        if not is_int(top["schema"]) or top["schema"] != SCHEMA_VERSION:
            self.fail("schema", f"{SCHEMA_VERSION} (the schema version this loader reads)", shown(top["schema"]))
        device = self.device(top["device"])
        host = self.host(top["host"])
        topology = self.topology(top["topology"], device, host) if "topology" in top else None
        profile = Profile(
            name=path.stem, path=path, description=self.text(top, "description", "", may_be_unknown=False),
            device=device, host=host, topology=topology, link=self.link(top["link"]),
            compute=self.compute(top["compute"]), targets=self.targets(top["targets"]),
            host_costs=self.host_costs(top["host_costs"]) if "host_costs" in top else HostCosts(),
            l3_link=self.l3_link(top["l3_link"]) if "l3_link" in top else L3LinkModel(),
            readings=self.text(top, "readings", "", may_be_unknown=False) if "readings" in top else None,
            sources=dict(self.sources), ranges=dict(self.ranges), stderrs=dict(self.stderrs),
        )
        return profile

    def device(self, data) -> DeviceSpec:
        d = self.section(data, "device", ("model", "hbm_gib", "devices_per_node", *DEVICE_OPTIONAL_BOUNDS))
        return DeviceSpec(
            model=self.text(d, "model", "device"),
            hbm_gib=self.number(d, "hbm_gib", "device", "GiB", 0, 4096, lo_open=True),
            devices_per_node=self.number(d, "devices_per_node", "device", "devices", 1, 64, integer=True),
            **{name: self.bounded(d, name, "device", bound, sourced=True)
               for name, bound in DEVICE_OPTIONAL_BOUNDS.items() if name in d},
        )

    def host(self, data) -> HostSpec:
        h = self.section(data, "host", ("cpu_vendor", "cpu_model", "numa_nodes", "memory_per_node_gib"))
        return HostSpec(
            cpu_vendor=self.text(h, "cpu_vendor", "host"),
            cpu_model=self.text(h, "cpu_model", "host"),
            numa_nodes=self.number(h, "numa_nodes", "host", "NUMA nodes", 1, 64, integer=True),
            memory_per_node_gib=self.number(h, "memory_per_node_gib", "host", "GiB", 0, 65536, lo_open=True),
        )

    def topology(self, data, device: DeviceSpec, host: HostSpec) -> TopologySpec:
        keys = ("device_numa", "devices_per_switch", "uplink_generation", "uplink_lanes", "ido")
        t = self.section(data, "topology", keys)
        expected = "a list of NUMA node numbers, one per device, or 'unknown'"
        raw, p = self.leaf(t, "device_numa", "topology", expected, False)
        device_numa = None
        if raw != UNKNOWN:
            if not isinstance(raw, list) or not raw:
                self.fail(p, expected, shown(raw))
            if device.devices_per_node is not None and len(raw) != device.devices_per_node:
                self.fail(p, f"{device.devices_per_node} entries (device.devices_per_node)", f"{len(raw)}: {raw!r}")
            top_node = (host.numa_nodes or 65) - 1
            for i, n in enumerate(raw):
                if not is_int(n) or not 0 <= n <= top_node:
                    self.fail(f"{p}[{i}]", f"a NUMA node number in [0, {top_node}] (host.numa_nodes)", shown(n))
            device_numa = tuple(raw)
        per_switch = self.number(t, "devices_per_switch", "topology", "devices", 1, 64, integer=True)
        # Switches split a node's devices into equal groups: a count that leaves a remainder
        # (3 per switch, 8 devices) describes no real machine and would skew per-switch sums.
        if per_switch and device.devices_per_node and device.devices_per_node % per_switch:
            self.fail("topology.devices_per_switch",
                      f"a divisor of device.devices_per_node ({device.devices_per_node})", shown(per_switch))
        lanes = self.number(t, "uplink_lanes", "topology", "PCIe lanes", 1, 32, integer=True)
        if lanes is not None and lanes not in (1, 2, 4, 8, 16, 32):
            self.fail("topology.uplink_lanes", "a PCIe link width: 1, 2, 4, 8, 16 or 32, or 'unknown'", shown(lanes))
        raw, p = self.leaf(t, "ido", "topology", "'on', 'off' or 'unknown'", False)
        ido = ("on" if raw else "off") if isinstance(raw, bool) else raw  # YAML 1.1 reads bare on/off as booleans
        if ido not in IDO_STATES:
            self.fail(p, "'on', 'off' or 'unknown'", shown(raw))
        return TopologySpec(
            device_numa=device_numa, devices_per_switch=per_switch,
            uplink_generation=self.number(t, "uplink_generation", "topology", "PCIe generation", 1, 7, integer=True),
            uplink_lanes=lanes, ido=ido,
        )

    def link(self, data) -> LinkModel:
        k = self.section(data, "link", ("h2d_gbps", "d2h_gbps", "per_segment_us", "per_launch_us",
                                        "registration_s_per_gib", *KERNEL_BOUNDS))
        optional = {name: self.bounded(k, name, "link", bound, sourced=True)
                    for name, bound in KERNEL_BOUNDS.items() if name in k}  # absent: unknown
        return LinkModel(**{name: self.bounded(k, name, "link", bound, sourced=True)
                            for name, bound in LINK_BOUNDS.items()}, **optional)

    def compute(self, data) -> ComputeModel:
        c = self.section(data, "compute", ("prefill_fixed_s", "prefill_per_token_s", "prefill_curve",
                                           "prefill_model", *COMPUTE_OPTIONAL_BOUNDS))
        curve = None
        if "prefill_curve" in c:
            expected = "a list of at least 2 [tokens, seconds] pairs, tokens ascending"
            raw, p = self.leaf(c, "prefill_curve", "compute", expected, True)
            if raw != UNKNOWN:
                if not isinstance(raw, list) or len(raw) < 2:
                    self.fail(p, expected, shown(raw))
                points = []
                for i, pt in enumerate(raw):
                    ok = (isinstance(pt, list) and len(pt) == 2 and is_int(pt[0]) and pt[0] >= 0
                          and is_number(pt[1]) and 0 <= pt[1] <= 86_400
                          and (not points or pt[0] > points[-1][0]))
                    if not ok:
                        self.fail(f"{p}[{i}]", "[tokens, seconds]: integer tokens above the previous point's, "
                                  "seconds in [0, 86400]", shown(pt))
                    points.append((pt[0], float(pt[1])))
                curve = tuple(points)
        optional = {name: self.bounded(c, name, "compute", bound, sourced=True)
                    for name, bound in COMPUTE_OPTIONAL_BOUNDS.items() if name in c}
        if "prefill_model" in c:
            optional["prefill_model"] = self.text(c, "prefill_model", "compute")
        return ComputeModel(**{name: self.bounded(c, name, "compute", bound, sourced=True)
                               for name, bound in COMPUTE_BOUNDS.items()}, prefill_curve=curve, **optional)

    def host_costs(self, data) -> HostCosts:
        """Optional section; each key optional too (absent = unknown), each known value sourced."""
        p = self.section(data, "host_costs", tuple(HOST_COST_BOUNDS))
        return HostCosts(**{name: self.bounded(p, name, "host_costs", bound, sourced=True)
                            for name, bound in HOST_COST_BOUNDS.items() if name in p})

    def l3_link(self, data) -> L3LinkModel:
        """Optional section; each key optional (absent = unknown), each known value sourced."""
        p = self.section(data, "l3_link", tuple(L3_LINK_BOUNDS))
        return L3LinkModel(**{name: self.bounded(p, name, "l3_link", bound, sourced=True)
                              for name, bound in L3_LINK_BOUNDS.items() if name in p})

    def targets(self, data) -> tuple[Target, ...]:
        if not isinstance(data, dict):
            self.fail("targets", "a mapping of target name -> {comparator, value, ...}, or {} for none", shown(data))
        out = []
        for name, raw in data.items():
            p = f"targets.{name}"
            if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                self.fail(p, "a snake_case target name", shown(name))
            t = self.section(raw, p, ("metric", "comparator", "value", "tolerance", "unit", "source", "note"))
            metric = t.get("metric", name)
            unit = METRICS[metric][0] if metric in METRICS else "the metric's unit"
            missing = {"comparator": f"one of {' '.join(COMPARATORS)}", "value": f"a finite number of {unit}",
                       "tolerance": f"a non-negative number (absolute, same unit) of {unit}",
                       "unit": f"{unit!r} (the unit of metric {metric})"}
            for key, expected in missing.items():
                if key not in t and metric in METRICS:
                    self.fail(f"{p}.{key}", expected, _MISSING)
            source = t.get("source")
            if not isinstance(source, str) or not source.strip():
                self.fail(f"{p}.source", "a non-empty string", _MISSING if "source" not in t else shown(source))
            note = t.get("note", "")
            if "note" in t and (not isinstance(note, str) or not note.strip()):
                self.fail(f"{p}.note", "a non-empty string", shown(note))
            try:  # Target checks every field: the same check, and words, as for a Target built directly
                out.append(Target(name, metric, t.get("comparator"), t.get("value"), t.get("tolerance"),
                                  t.get("unit"), source.strip(), note.strip()))
            except FieldError as e:
                self.fail(p if e.field == "name" else f"{p}.{e.field}", e.expected, e.got)
        return tuple(out)
