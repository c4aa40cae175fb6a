"""Topology: NUMA nodes, accelerators, PCIe uplinks and their ordering (IDO) bits.

`topology_model` (Topology, NumaNode, PciDevice, the sysfs list parser, uplink grouping), `sysfs` (the
running machine), `emulate` (a profile's topology on any machine), `xpusmi` (the `xpu-smi topo -m`
parser), `discover` (which source to use; running xpu-smi), `binding` (the per-device NUMA
binding planner). The public names are re-exported here.
"""

from hal.topology.discover import discover, from_xpusmi, from_xpusmi_command, has_hardware
from hal.topology.emulate import from_profile
from hal.topology.sysfs import from_sysfs, sysfs_numa_nodes
from hal.topology.topology_model import (
    GIB,
    NumaNode,
    PciDevice,
    Topology,
    group_by_uplink,
    ido_state,
    parse_cpulist,
)

__all__ = [
    "GIB", "NumaNode", "PciDevice", "Topology", "discover", "from_profile", "from_sysfs", "from_xpusmi",
    "from_xpusmi_command", "group_by_uplink", "has_hardware", "ido_state", "parse_cpulist", "sysfs_numa_nodes",
]
