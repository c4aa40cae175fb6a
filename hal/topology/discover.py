"""Which topology source describes the machine a backend runs on, and the xpu-smi reader.

`discover` picks one: real sysfs when the backend drives real devices (decided from its
capabilities, `has_hardware`), else the profile's emulated box. `from_xpusmi` reads the text of
`xpu-smi topo -m`; `from_xpusmi_command` runs it where the binary exists and falls back to sysfs
(saying so in the notes) where it does not: what the xpu backend's topology uses.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from typing import Any

from hal.topology.emulate import from_profile
from hal.topology.sysfs import from_sysfs, sysfs_numa_nodes
from hal.topology.topology_model import NumaNode, Topology
from hal.topology.xpusmi import parse_topo_matrix, to_topology

XPUSMI_TIMEOUT_S = 30.0


def from_xpusmi(text: str, numa_nodes: tuple[NumaNode, ...] | None = None, origin: str = "xpu-smi topo -m") -> Topology:
    """Topology from `xpu-smi topo -m` text; see hal.topology.xpusmi.to_topology for how uplinks are inferred."""
    return to_topology(parse_topo_matrix(text), numa_nodes, origin)


def from_xpusmi_command(binary: str = "xpu-smi", sysfs_root: str = "/sys") -> Topology:
    """Run `<binary> topo -m` and build the topology from it (NUMA nodes from sysfs); when the
    binary is missing, fails or prints what the parser cannot read, sysfs, with a note why."""
    path = shutil.which(binary)
    if path is None:
        why = f"{binary} not found on PATH"
    else:
        try:
            run = subprocess.run([path, "topo", "-m"], capture_output=True, text=True,
                                 timeout=XPUSMI_TIMEOUT_S, check=True)
            return from_xpusmi(run.stdout, sysfs_numa_nodes(sysfs_root), origin=f"{path} topo -m")
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            why = f"{path} topo -m failed: {type(e).__name__}: {e}"
    topo = from_sysfs(sysfs_root)
    return dataclasses.replace(topo, notes=(f"xpu-smi not used ({why}); topology read from sysfs",) + topo.notes)


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
