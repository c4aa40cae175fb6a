"""Host topology as the harness sees it: NUMA nodes, accelerators, and which of them share an uplink.

Three sources give the same model:
- `from_sysfs`: the running machine (NUMA nodes, PCI accelerators, their bridge chain, and the
  PCIe ID-based-ordering (IDO) bits read from config space where readable);
- `from_xpusmi`: the text of `xpu-smi topo -m` (parsed by hal.topology.xpusmi);
- `from_profile`: a hardware profile's `topology:` section, so the p800 box (8 NUMA nodes,
  2 XPUs per x16 uplink) is exercised on a machine that has neither.
`discover` picks one: real sysfs when the backend drives real devices, else the profile.

Why uplinks and IDO matter: two devices behind one x16 uplink share its bandwidth, and with IDO
off their completions are kept in one strict order through the shared path, so one device's
D2H/H2D stream stalls the other's. The binding planner and `hicache doctor` warn on that.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

GIB = 1 << 30

# PCI vendor id -> (vendor name, accepted class codes as (class >> 16) or (class >> 8) prefixes).
# NVIDIA GPUs are display controllers (class 0x03xxxx: 0x0300 VGA, 0x0302 3D). Kunlunxin XPUs sit
# under Baidu's vendor id 0x1d22 (pci.ids: 0x3684 "Kunlun AI Accelerator", 0x3685 "Kunlun2 AI
# Accelerator [VF]"; public inventory tooling lists 0x3688 as P800 with class 0x078000). The same
# vendor id also covers a storage device (0x1380), so the class filter keeps only accelerator-like
# functions: processing accelerator (0x12), "other communication controller" (0x0780) and display.
ACCELERATOR_VENDORS: dict[int, tuple[str, tuple[int, ...], tuple[int, ...]]] = {
    # vendor: (name, accepted base classes (class >> 16), accepted class+subclass (class >> 8))
    0x10DE: ("nvidia", (0x03,), ()),
    0x1D22: ("kunlunxin", (0x03, 0x12), (0x0780,)),
}

# PCIe capability layout (PCI Express Base spec): capability list pointer at 0x34 (valid when
# Status bit 4 is set), PCI Express capability id 0x10, Device Control 2 at cap + 0x28 with
# IDO Request Enable = bit 8 and IDO Completion Enable = bit 9.
_STATUS, _STATUS_CAP_LIST = 0x06, 0x10
_CAP_PTR, _CAP_ID_PCIE, _DEVCTL2 = 0x34, 0x10, 0x28
_IDO_REQ_BIT, _IDO_CPL_BIT = 1 << 8, 1 << 9

_PCI_ADDR = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
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


# -- small parsers -------------------------------------------------------------------------------


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


def ido_from_config(config: bytes) -> tuple[bool | None, bool | None]:
    """(IDO request enable, IDO completion enable) from config-space bytes; (None, None) when the
    PCIe capability is not within what could be read (non-root readers get only 64 bytes)."""
    if len(config) < 0x40 or not config[_STATUS] & _STATUS_CAP_LIST:
        return None, None
    ptr, seen = config[_CAP_PTR] & 0xFC, set()
    while ptr and ptr not in seen and ptr + 2 <= len(config):
        seen.add(ptr)  # a looping list in broken hardware must not hang discovery
        if config[ptr] == _CAP_ID_PCIE:
            at = ptr + _DEVCTL2
            if at + 2 > len(config):
                return None, None
            ctl2 = int.from_bytes(config[at : at + 2], "little")
            return bool(ctl2 & _IDO_REQ_BIT), bool(ctl2 & _IDO_CPL_BIT)
        ptr = config[ptr + 1] & 0xFC
    return None, None


def _read(path: str, default: str | None = None) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


# -- sysfs ---------------------------------------------------------------------------------------


def sysfs_numa_nodes(sysfs_root: str = "/sys") -> tuple[NumaNode, ...]:
    """NUMA nodes from <root>/devices/system/node; one node 0 on a kernel without NUMA."""
    base = os.path.join(sysfs_root, "devices/system/node")
    ids = sorted(int(d[4:]) for d in _listdir(base) if re.fullmatch(r"node\d+", d))
    if not ids:
        cpus = parse_cpulist(_read(os.path.join(sysfs_root, "devices/system/cpu/online"), "") or "")
        return (NumaNode(0, cpus, 0, (10,)),)
    nodes = []
    for i in ids:
        d = os.path.join(base, f"node{i}")
        cpus = parse_cpulist(_read(os.path.join(d, "cpulist"), "") or "", f"node{i}/cpulist")
        mem = 0
        for line in (_read(os.path.join(d, "meminfo"), "") or "").splitlines():
            parts = line.split()  # "Node 0 MemTotal:  12150556 kB"
            if len(parts) >= 4 and parts[2] == "MemTotal:":
                mem = int(parts[3]) * 1024
        dist = tuple(int(x) for x in (_read(os.path.join(d, "distance"), "") or "").split())
        nodes.append(NumaNode(i, cpus, mem, dist))
    return tuple(nodes)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _is_accelerator(vendor: int, klass: int) -> bool:
    entry = ACCELERATOR_VENDORS.get(vendor)
    return bool(entry) and ((klass >> 16) in entry[1] or (klass >> 8) in entry[2])


def _pci_function(sysfs_root: str, address: str) -> PciDevice:
    d = os.path.join(sysfs_root, "bus/pci/devices", address)
    real = os.path.realpath(d)
    # The device's real path runs /sys/devices/pciDDDD:BB/<root port>/<switch ports>.../<device>.
    chain = [p for p in real.split(os.sep) if _PCI_ADDR.match(p)]
    upstream = tuple(chain[:-1]) if chain and chain[-1] == address else ()
    node = int(_read(os.path.join(d, "numa_node"), "-1") or "-1")
    try:
        with open(os.path.join(d, "config"), "rb") as f:
            config = f.read(4096)
    except OSError:
        config = b""
    req, cpl = ido_from_config(config)
    return PciDevice(
        address=address,
        vendor=int(_read(os.path.join(d, "vendor"), "0") or "0", 16),
        device=int(_read(os.path.join(d, "device"), "0") or "0", 16),
        klass=int(_read(os.path.join(d, "class"), "0") or "0", 16),
        numa_node=None if node < 0 else node,
        local_cpus=parse_cpulist(_read(os.path.join(d, "local_cpulist"), "") or "", f"{address}/local_cpulist"),
        upstream=upstream,
        ido_request=req,
        ido_completion=cpl,
    )


def group_by_uplink(devices: tuple[PciDevice, ...]) -> tuple[tuple[int, ...], ...]:
    """Devices behind the same root port share one uplink into the CPU. The root port (first
    bridge of the chain) is the right key even with cascaded switches: whatever switches sit
    below it, everything behind it shares that one link. With one switch level this is the same
    grouping as 'same switch upstream port'. A device with no bridge above it is alone."""
    groups: dict[str, list[int]] = {}
    for i, dev in enumerate(devices):
        groups.setdefault(dev.upstream[0] if dev.upstream else dev.address, []).append(i)
    return tuple(tuple(g) for g in groups.values())


def from_sysfs(sysfs_root: str = "/sys") -> Topology:
    """The running machine (or a synthetic tree under `sysfs_root`, which is how tests build one)."""
    numa = sysfs_numa_nodes(sysfs_root)
    addrs = sorted(a for a in _listdir(os.path.join(sysfs_root, "bus/pci/devices")) if _PCI_ADDR.match(a))
    funcs = [_pci_function(sysfs_root, a) for a in addrs]
    # Ordinals follow PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID and xpu-smi number them.
    devices = tuple(f for f in funcs if _is_accelerator(f.vendor, f.klass))
    ports = {d.upstream[0] for d in devices if d.upstream}
    root_ports = {a: _pci_function(sysfs_root, a) for a in sorted(ports) if a in addrs}
    notes = []
    if any(d.ido == "unknown" for d in devices):
        notes.append("PCIe config space beyond 64 bytes is unreadable for some devices (run as root to read IDO)")
    return Topology("sysfs", numa, devices, group_by_uplink(devices), sysfs_root, root_ports, tuple(notes))


# -- profile emulation ---------------------------------------------------------------------------


def from_profile(profile: Any, sysfs_root: str = "/sys") -> Topology:
    """The topology a hardware profile describes, emulated on any machine.

    Devices are grouped onto uplinks in index order, `devices_per_switch` at a time (XPU0+XPU1,
    XPU2+XPU3, ... on the p800), and every function gets the profile's IDO setting. Devices behind
    one uplink always share its root port's NUMA node; when the profile does not say which node
    (`device_numa: unknown`), uplinks are assumed spread evenly over the nodes (0, 2, 4, 6 for 4
    uplinks on 8 nodes) and a note says the node ids are placeholders. Capacity per card does not
    depend on which nodes they are. Host facts the profile leaves unknown (the emu profile) are
    read from this machine's sysfs. NUMA distances are not in profiles: ().
    """
    profile = _load_profile(profile)
    topo = profile.topology
    if topo is None:
        raise ValueError(f"profile {profile.name!r} has no topology (add a topology: section to {profile.path})")
    if not profile.device.devices_per_node:
        raise ValueError(f"profile {profile.name!r}: device.devices_per_node is unknown, so its topology cannot be emulated")
    n_dev = int(profile.device.devices_per_node)
    notes = []
    if profile.host.numa_nodes is None:
        nodes = sysfs_numa_nodes(sysfs_root)
        notes.append(f"profile {profile.name} does not give NUMA nodes: this host's {len(nodes)} node(s) used")
    else:
        mem_gib = profile.host.memory_per_node_gib
        mem = 0 if mem_gib is None else int(float(mem_gib) * GIB)
        nodes = tuple(NumaNode(i, (), mem, ()) for i in range(int(profile.host.numa_nodes)))
        if mem_gib is None:
            notes.append(f"profile {profile.name} does not give memory per node")
    ids = [n.id for n in nodes]
    per_switch = max(1, int(topo.devices_per_switch or 1))
    dev_numa = topo.device_numa
    if dev_numa is not None:
        if len(dev_numa) != n_dev:
            raise ValueError(f"profile {profile.name!r}: topology.device_numa has {len(dev_numa)} entries for {n_dev} devices")
        bad = [(i, nd) for i, nd in enumerate(dev_numa) if nd not in ids]
        if bad:
            raise ValueError(f"profile {profile.name!r}: topology.device_numa puts devices on nodes {bad} not in {ids}")
    elif topo.devices_per_switch:
        uplinks = -(-n_dev // per_switch)
        dev_numa = tuple(ids[(i // per_switch) * len(ids) // uplinks] for i in range(n_dev))
        notes.append(f"assumed: profile {profile.name} gives no device_numa; uplinks placed on nodes "
                     f"{sorted(set(dev_numa))} (placeholders; the {per_switch} devices of an uplink share a node)")
    else:
        notes.append(f"profile {profile.name} gives neither device_numa nor devices_per_switch: device NUMA unknown")
    bit = {"on": True, "off": False}.get(topo.ido)  # 'unknown' -> None
    devices, root_ports = [], {}  # profiles carry no PCI ids: vendor/device 0
    for i in range(n_dev):
        g = i // per_switch
        port = f"{profile.name}:rootport{g}"
        upstream = (port, f"{profile.name}:switch{g}") if per_switch > 1 else (port,)
        root_ports[port] = PciDevice(port, 0, 0, 0x060400, None, (), (), bit, bit)
        numa = None if dev_numa is None else dev_numa[i]
        devices.append(PciDevice(f"XPU{i}", 0, 0, 0x120000, numa, (), upstream, bit, bit))
    lanes = f" x{topo.uplink_lanes}" if topo.uplink_lanes else ""
    gen = f" Gen{topo.uplink_generation}" if topo.uplink_generation else ""
    sharing = f"{per_switch} device(s) per PCIe{gen}{lanes} uplink" if topo.devices_per_switch else "uplink sharing unknown"
    notes.insert(0, f"emulated from profile {profile.name}: {len(nodes)} NUMA node(s), {sharing}, IDO {topo.ido}")
    devices_t = tuple(devices)
    return Topology("profile", nodes, devices_t, group_by_uplink(devices_t), profile.name, root_ports, tuple(notes))


def _load_profile(profile: Any) -> Any:
    if isinstance(profile, str | os.PathLike):
        from hardware_profiles.model import load_profile

        return load_profile(profile)
    return profile


# -- xpu-smi -------------------------------------------------------------------------------------


def from_xpusmi(text: str, numa_nodes: tuple[NumaNode, ...] | None = None, origin: str = "xpu-smi topo -m") -> Topology:
    """Topology from `xpu-smi topo -m` text; see hal.topology.xpusmi.to_topology for how uplinks are inferred."""
    from hal.topology.xpusmi import parse_topo_matrix, to_topology

    return to_topology(parse_topo_matrix(text), numa_nodes, origin)


# -- choosing a source ---------------------------------------------------------------------------


def has_hardware(capabilities: Any) -> bool:
    """True when a backend with these hal.backend.Capabilities drives real devices here: it is
    available, moves bytes, and its device buffers are not CPU memory."""
    return bool(capabilities.available and capabilities.moves_bytes and capabilities.device_type != "cpu")


def discover(profile: Any = None, hardware: bool = False, sysfs_root: str = "/sys") -> Topology:
    """Real sysfs when the backend has hardware (or no profile is given); else the profile's
    emulated topology. Unknown profile, or a profile without topology: ValueError."""
    if profile is not None and not hardware:
        return from_profile(profile)
    return from_sysfs(sysfs_root)
