"""`hicache doctor`'s run: every check in order, host-side preflight first, then configuration advice.

Checks run in the order the seed work found costs: PCIe ordering, NUMA placement (topology_checks),
huge pages, page tables (huge_pages), memory fit (host_memory), memlock, registered size
(pinned_memory). Each gives a status (ok, warn, fail, unknown), what it saw, and one line to fix it;
only `fail` makes doctor exit 1 (doctor_report). Host facts come from `HostPaths`.
"""

from __future__ import annotations

import os
from typing import Any

from conformance.doctor.advice import advise_binding, advise_pool_size, advise_write_policy
from conformance.doctor.doctor_report import DoctorReport
from conformance.doctor.host_memory import check_host_memory
from conformance.doctor.huge_pages import check_page_table_entries, check_thp_anon, check_thp_shmem
from conformance.doctor.pinned_memory import cap_ipc_lock, check_memlock, check_registered_size, memlock_limit
from conformance.doctor.records import GIB, Check, HostPaths
from conformance.doctor.stack_preflight import preflight_checks
from conformance.doctor.topology_checks import check_numa_placement, check_pcie_ordering
from hal.common.units import parse_size
from hal.memory import vm
from hal.topology.binding import plan_binding
from hal.topology.discover import discover, has_hardware
from hal.topology.topology_model import Topology

__all__ = ["DoctorReport", "HostPaths", "parse_bytes", "run_doctor"]
DEFAULT_POOL_BYTES = 16 * GIB  # used when neither --pool-bytes nor a binding plan gives a size
THIS_HOST = HostPaths()  # the real /sys, /proc and /dev/shm


def parse_bytes(text: str | int, arg: str = "--pool-bytes") -> int:
    """'80G' / '80GB' (decimal), '75GiB' (binary) or a plain integer -> bytes, > 0 (hal.common.units)."""
    return parse_size(text, name=arg, minimum=1)


def _drives_hardware(backend: str, profile: Any) -> bool:
    """Whether backend `backend` drives real devices here, from its capabilities (hal.topology)."""
    from hal.backend import backend_class

    try:
        cls = backend_class(backend)
    except ImportError:  # a backend whose module cannot import here drives nothing
        return False
    return bool(cls.probe()[0]) and has_hardware(cls(profile).capabilities())


def run_doctor(backend: str = "emu", profile: Any = None, pool_bytes: int | None = None,
               paths: HostPaths = THIS_HOST) -> DoctorReport:
    """Validate every argument first (ValueError naming it), then run the checks in order."""
    if pool_bytes is not None and (isinstance(pool_bytes, bool) or not isinstance(pool_bytes, int) or pool_bytes <= 0):
        raise ValueError(f"--pool-bytes: must be a positive integer, got {pool_bytes!r}")
    from hal.backend import available_backends

    if backend not in available_backends():
        raise ValueError(f"--backend: unknown backend {backend!r}; known: {', '.join(available_backends())}")
    if profile is not None and not hasattr(profile, "link"):
        from hardware_profiles import load_profile

        try:
            profile = load_profile(profile)
        except ValueError as e:
            raise ValueError(f"--profile: {e}") from e
    hardware = _drives_hardware(backend, profile)
    preflight, stack = preflight_checks(backend)
    missing = None  # why the box's layout or memory is not known, when it is not
    if profile is not None and not hardware and profile.topology is None:
        # Host-side checks still run on this host; what needs the box's layout says unknown.
        missing = f"profile {profile.name} has no topology"
        topology = Topology("profile", (), (), (), profile.name,
                            notes=(f"{missing}: devices, uplinks and NUMA placement unknown",))
    else:
        topology = discover(profile, hardware=hardware, sysfs_root=paths.sys_root)
        if topology.source == "profile" and (profile.host.numa_nodes is None or profile.host.memory_per_node_gib is None):
            missing = f"profile {profile.name} gives no host memory (host.numa_nodes, host.memory_per_node_gib)"
    uplinks_unknown = None
    if topology.source == "profile" and (profile.topology is None or profile.topology.devices_per_switch is None):
        uplinks_unknown = missing if profile.topology is None else \
            f"profile {profile.name} does not say how devices share uplinks (topology.devices_per_switch)"
    local = plan_binding(topology, "local")
    interleave = plan_binding(topology, "interleave")
    shared = plan_binding(topology, "interleave", shared=True)
    if pool_bytes is not None:
        source = "--pool-bytes"
    elif local.min_capacity() > 0 and missing is None:
        pool_bytes, source = local.min_capacity(), "planned local capacity per card"
    else:
        pool_bytes, source = DEFAULT_POOL_BYTES, "default"
    thp_mode = vm.thp_mode(os.path.join(paths.sys_root, "kernel/mm/transparent_hugepage/enabled"))
    numa_check, coverage = check_numa_placement(topology)
    checks = [
        *preflight,
        check_pcie_ordering(topology) if not uplinks_unknown else
        Check("pcie_ordering", "unknown", f"{uplinks_unknown}: uplink sharing unknown",
              f"fill topology.devices_per_switch in {profile.path}, or run on the accelerator host"),
        numa_check,
        check_thp_anon(paths),
        check_thp_shmem(paths),
        check_page_table_entries(pool_bytes, coverage if paths.real else None, thp_mode),
        check_host_memory(topology, pool_bytes, paths.proc_root, assumed=source == "default",
                          cgroup_root=os.path.join(paths.sys_root, "fs/cgroup")),
        check_memlock(pool_bytes, memlock_limit(), cap_ipc_lock(paths.proc_root)),
        check_registered_size(profile, pool_bytes),
        advise_binding(local, interleave, pool_bytes, missing, shared),
        advise_pool_size(profile, pool_bytes),
        advise_write_policy(topology),
    ]
    return DoctorReport(backend, None if profile is None else profile.name, topology, pool_bytes, source, checks,
                        stack)
