"""The topology model: NUMA nodes, accelerators, and which of them share an uplink into the host.

Every source (hal.topology.sysfs, .emulate, .discover's xpu-smi reader) builds the same
`Topology`. Why uplinks and IDO matter: two devices behind one x16 uplink share its bandwidth,
and with PCIe ID-based ordering (IDO) off their completions are kept in one strict order through
the shared path, so one device's D2H/H2D stream stalls the other's. The binding planner and
`hicache doctor` warn on that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

GIB = 1 << 30

SOURCES = ("sysfs", "profile", "xpu-smi")


class NumaNode(NamedTuple):
    id: int
    cpus: tuple[int, ...]
    memory_bytes: int  # 0 when the source does not say
    distances: tuple[int, ...]  # SLIT row (index = node id); () when unknown


class PciDevice(NamedTuple):
    address: str  # PCI address on sysfs; "XPU3" style names from xpu-smi and profiles
    vendor: int
    device: int
    klass: int
    numa_node: int | None  # None: firmware gives no affinity (sysfs -1) or the source does not say
    local_cpus: tuple[int, ...]
    upstream: tuple[str, ...]  # bridge chain from the root port down to the parent bridge
    ido_request: bool | None  # None: config space unreadable here
    ido_completion: bool | None

    @property
    def ido(self) -> str:
        return ido_state([(self.ido_request, self.ido_completion)])


def ido_state(bits: list[tuple[bool | None, bool | None]]) -> str:
    """'off' if any function has an IDO bit clear, else 'unknown' if any is unreadable, else 'on'."""
    flat = [b for pair in bits for b in pair]
    if any(b is False for b in flat):
        return "off"
    if any(b is None for b in flat):
        return "unknown"
    return "on"


@dataclass(frozen=True)
class Topology:
    """NUMA nodes, accelerators (index = device ordinal) and their grouping onto uplinks."""

    source: str  # one of SOURCES
    numa_nodes: tuple[NumaNode, ...]
    devices: tuple[PciDevice, ...]  # accelerators, index = device ordinal
    uplinks: tuple[tuple[int, ...], ...]  # device indices behind one uplink, every device once
    origin: str = ""  # where it came from: a sysfs root, a profile name, a file
    root_ports: dict[str, PciDevice] = field(default_factory=dict)  # root ports of the uplinks
    notes: tuple[str, ...] = ()  # what the source could not tell

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"source: expected one of {', '.join(SOURCES)}, got {self.source!r}")
        if sorted(i for g in self.uplinks for i in g) != list(range(len(self.devices))):
            raise ValueError(f"uplinks: {self.uplinks} must hold every device index once")

    def node_ids(self) -> list[int]:
        return [n.id for n in self.numa_nodes]

    def node(self, node_id: int) -> NumaNode:
        for n in self.numa_nodes:
            if n.id == node_id:
                return n
        raise ValueError(f"node: NUMA node {node_id} does not exist; nodes are {self.node_ids()}")

    def uplink_of(self, index: int) -> tuple[int, ...]:
        for g in self.uplinks:
            if index in g:
                return g
        raise ValueError(f"index: device {index} does not exist; there are {len(self.devices)}")

    def uplink_ido(self, group: tuple[int, ...]) -> str:
        """IDO of everything that sets the attribute on this uplink: its devices and its root port
        (the root complex originates completions for device reads of host memory)."""
        bits = [(self.devices[i].ido_request, self.devices[i].ido_completion) for i in group]
        for i in group:
            up = self.devices[i].upstream
            if up and up[0] in self.root_ports:
                rp = self.root_ports[up[0]]
                bits.append((rp.ido_request, rp.ido_completion))
        return ido_state(bits)

    def shared_uplinks(self) -> list[tuple[tuple[int, ...], str]]:
        """[(device indices, ido state)] for every uplink that more than one device sits behind."""
        return [(g, self.uplink_ido(g)) for g in self.uplinks if len(g) > 1]

    def describe(self) -> str:
        nodes = len(self.numa_nodes)
        return f"{self.source} ({self.origin}): {nodes} NUMA node(s), {len(self.devices)} accelerator(s)"


def parse_cpulist(text: str, what: str = "cpulist") -> tuple[int, ...]:
    """The sysfs list format of CPU and NUMA node sets (cpulist, node/online; hal.memory.numa uses it too):
    '0-3,8' -> (0, 1, 2, 3, 8); '' -> (). ValueError naming `what` on anything else."""
    out: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"{what}: {text.strip()!r} is not a list like '0-3,8'")
        out.extend(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return tuple(out)


def group_by_uplink(devices: tuple[PciDevice, ...]) -> tuple[tuple[int, ...], ...]:
    """Devices behind the same root port share one uplink into the CPU. The root port (first
    bridge of the chain) is the right key even with cascaded switches: whatever switches sit
    below it, everything behind it shares that one link. With one switch level this is the same
    grouping as 'same switch upstream port'. A device with no bridge above it is alone."""
    groups: dict[str, list[int]] = {}
    for i, dev in enumerate(devices):
        groups.setdefault(dev.upstream[0] if dev.upstream else dev.address, []).append(i)
    return tuple(tuple(g) for g in groups.values())
