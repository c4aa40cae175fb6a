"""The profile schema: each section of a profile's YAML read into its dataclass, every key checked.

`build` reads the document (hardware_profiles.strict_yaml) and walks it once, section by section
(device, host, topology, link, compute, host_costs, l3_link, targets), each leaf through LeafReader
(hardware_profiles.sourced_leaves); every error names the file, the key path and what was expected.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hardware_profiles.cost_models import ComputeModel, HostCosts, L3LinkModel, LinkModel
from hardware_profiles.field_checks import (
    COMPUTE_BOUNDS,
    COMPUTE_OPTIONAL_BOUNDS,
    DEVICE_OPTIONAL_BOUNDS,
    HOST_COST_BOUNDS,
    KERNEL_BOUNDS,
    L3_LINK_BOUNDS,
    LINK_BOUNDS,
    FieldError,
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
from hardware_profiles.sourced_leaves import MISSING, LeafReader
from hardware_profiles.strict_yaml import parse_document, shown
from hardware_profiles.values import is_int, is_number


def build(text: str, path: Path) -> Profile:
    """Parse and validate one profile's YAML text; errors name `path` and the key path."""
    return _ProfileReader(str(path)).profile(parse_document(text, str(path)), path)


class _ProfileReader(LeafReader):
    """Reads each section of a profile into its dataclass."""

    def profile(self, data: Any, path: Path) -> Profile:
        top = self.section(data, "", ("schema", "description", "device", "host", "topology",
                                      "link", "compute", "host_costs", "l3_link", "readings",
                                      "targets"))
        for key in ("schema", "description", "device", "host", "link", "compute", "targets"):
            if key not in top:
                self.fail(key, f"a '{key}' entry (see hardware_profiles/README.md)", MISSING)
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
                    self.fail(f"{p}.{key}", expected, MISSING)
            source = t.get("source")
            if not isinstance(source, str) or not source.strip():
                self.fail(f"{p}.source", "a non-empty string", MISSING if "source" not in t else shown(source))
            note = t.get("note", "")
            if "note" in t and (not isinstance(note, str) or not note.strip()):
                self.fail(f"{p}.note", "a non-empty string", shown(note))
            try:  # Target checks every field: the same check, and words, as for a Target built directly
                out.append(Target(name, metric, t.get("comparator"), t.get("value"), t.get("tolerance"),
                                  t.get("unit"), source.strip(), note.strip()))
            except FieldError as e:
                self.fail(p if e.field == "name" else f"{p}.{e.field}", e.expected, e.got)
        return tuple(out)
