"""The running machine's topology from sysfs: NUMA nodes, PCI accelerators, bridge chains, IDO bits.

Tests point `sysfs_root` at a synthetic tree; IDO bits come from PCIe config space where it is
readable (all of it needs root; others get the first 64 bytes, so IDO reads as unknown).
"""

from __future__ import annotations

import os
import re

from hal.topology.topology_model import NumaNode, PciDevice, Topology, group_by_uplink, parse_cpulist

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
