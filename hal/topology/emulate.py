"""A hardware profile's topology emulated on any machine (the p800 box where there is none)."""

from __future__ import annotations

import os
from typing import Any

from hal.topology.sysfs import sysfs_numa_nodes
from hal.topology.topology_model import GIB, NumaNode, PciDevice, Topology, group_by_uplink


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
        from hardware_profiles.loader import load_profile

        return load_profile(profile)
    return profile
