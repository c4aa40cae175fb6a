"""Topology: NUMA nodes, accelerators, PCIe uplinks and their ordering (IDO) bits.

`model` (Topology, NumaNode, PciDevice and the sysfs list parser), `sysfs` (the running machine),
`emulate` (a profile's topology on any machine), `xpusmi` (`xpu-smi topo -m`), `discover` (which
source to use), `binding` (the per-device NUMA binding planner).
"""
