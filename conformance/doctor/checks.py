"""`hicache doctor` checks: host-side preflight first, then configuration advice.

Checks run in the order the seed work found costs: PCIe ordering, NUMA placement, huge pages, page
tables, memory fit, memlock, registered size. Each gives a status (ok, warn, fail, unknown), what it
saw, and one line to fix it; only `fail` makes doctor exit 1. Host facts come from `HostPaths`.
"""

from __future__ import annotations

import json
import os
import resource
from dataclasses import dataclass
from typing import Any

from conformance.doctor.advice import advise_binding, advise_pool_size, advise_write_policy
from conformance.doctor.host_memory import check_host_memory
from conformance.doctor.records import GIB, MIB, STATUSES, Check, fmt_bytes
from conformance.doctor.stack_preflight import preflight_checks
from hal.common.units import parse_size
from hal.memory import shm, vm
from hal.topology.binding import plan_binding
from hal.topology.discover import discover, has_hardware
from hal.topology.topology_model import Topology

__all__ = ["STATUSES", "Check", "DoctorReport", "HostPaths", "fmt_bytes", "parse_bytes", "run_doctor"]
PAGE_4K, PAGE_2M, PTE_BYTES = 4096, 2 * MIB, 8
TEST_BUFFER_BYTES = 4 * MIB  # two 2 MB pages: enough to see placement and THP, cheap anywhere
DEFAULT_POOL_BYTES = 16 * GIB  # used when neither --pool-bytes nor a binding plan gives a size
# The seed work: registering 80 GB of host pool slowed the workload +20.6%, 15 GB only +8.8%.
REGISTERED_WARN_BYTES = 16 * GIB
CAP_IPC_LOCK = 14


@dataclass(frozen=True)
class HostPaths:
    sys_root: str = "/sys"
    proc_root: str = "/proc"
    shm_dir: str = "/dev/shm"

    @property
    def real(self) -> bool:
        return self.sys_root == "/sys" and self.proc_root == "/proc"


@dataclass
class DoctorReport:
    backend: str
    profile: str | None
    topology: Topology
    pool_bytes: int
    pool_source: str
    checks: list[Check]
    stack: dict[str, Any] | None = None  # the device software stack's versions, where the backend has one

    def exit_code(self) -> int:
        return 1 if any(c.status == "fail" for c in self.checks) else 0

    def to_dict(self) -> dict[str, Any]:
        t = self.topology
        return {
            "backend": self.backend,
            "profile": self.profile,
            "topology": {"source": t.source, "origin": t.origin, "devices": len(t.devices),
                         "numa_nodes": len(t.numa_nodes), "notes": list(t.notes)},
            "pool_bytes": self.pool_bytes,
            "pool_source": self.pool_source,
            "checks": [c._asdict() for c in self.checks],
            **({"stack": self.stack} if self.stack is not None else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_table(self) -> str:
        head = (f"hicache doctor: backend {self.backend}, profile {self.profile or '-'}, "
                f"topology {self.topology.describe()}, pool {fmt_bytes(self.pool_bytes)} ({self.pool_source})")
        width = max(len(c.name) for c in self.checks)
        lines = [head, "", f"{'CHECK'.ljust(width)}  STATUS   VALUE"]
        if self.stack is not None:
            lines[1:1] = ["stack: " + ", ".join(f"{k} {v if v is not None else '-'}" for k, v in self.stack.items())]
        for c in self.checks:
            lines.append(f"{c.name.ljust(width)}  {c.status.ljust(7)}  {c.value}")
            if c.status != "ok" and c.fix:
                lines.append(f"{''.ljust(width)}  {''.ljust(7)}  fix: {c.fix}")
        return "\n".join(lines)


def parse_bytes(text: str | int, arg: str = "--pool-bytes") -> int:
    """'80G' / '80GB' (decimal), '75GiB' (binary) or a plain integer -> bytes, > 0 (hal.common.units)."""
    return parse_size(text, name=arg, minimum=1)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


# -- host-side checks, in the seed's order ------------------------------------------------------


def check_pcie_ordering(topology: Topology) -> Check:
    shared = topology.shared_uplinks()
    fix = ("enable PCIe ID-based ordering in BIOS, or per function: "
           "setpci -s <addr> CAP_EXP+28.w=0300:0300 (DevCtl2 bits 8-9) on the devices and their root port")
    if not topology.devices:
        return Check("pcie_ordering", "unknown", f"no accelerators in {topology.describe()}",
                     "run on the accelerator host, or pass --profile to check the profile's layout")
    if not shared:
        return Check("pcie_ordering", "ok", f"no uplink is shared by two devices ({topology.source})", "")
    parts = [f"{'+'.join(topology.devices[i].address for i in g)} IDO {ido}" for g, ido in shared]
    states = {ido for _, ido in shared}
    status = "warn" if "off" in states else "unknown" if "unknown" in states else "ok"
    value = f"{len(shared)} shared uplink(s): {'; '.join(parts)} ({topology.source})"
    return Check("pcie_ordering", status, value, "" if status == "ok" else fix)


def check_numa_placement(topology: Topology) -> tuple[Check, float | None]:
    """Allocate a small buffer bound to each device node that exists here; read where it landed.
    Returns the check and the buffer's measured huge-page coverage (None when nothing ran)."""
    from hal.memory import numa as hnuma

    host_nodes = hnuma.online_nodes()
    wanted = sorted({d.numa_node for d in topology.devices if d.numa_node is not None})
    nodes = [n for n in wanted if n in host_nodes]
    absent = [n for n in wanted if n not in host_nodes]
    note = f" (device nodes {absent} are not online here)" if absent and topology.source == "sysfs" else ""
    if topology.source != "sysfs" or not nodes:
        # Emulated, or no device node known: the profile's nodes need not exist here; test node 0
        # of this host so the mechanism itself (mbind + first touch) is still checked.
        why = "emulated topology" if topology.source != "sysfs" else "no device NUMA node known"
        note = f" ({why}; tested this host's node {host_nodes[0]})"
        nodes = [host_nodes[0]]
    try:
        from hal.memory.host import allocate_host
    except ImportError as e:
        return Check("numa_placement", "unknown", f"hal.memory.host unavailable: {e}",
                     "install the harness with its hal package"), None
    results, coverage = [], None
    for node in nodes:
        try:
            buf = allocate_host(TEST_BUFFER_BYTES, huge_pages=True, numa=("bind", [node]))
        except (OSError, ValueError, MemoryError) as e:
            return Check("numa_placement", "unknown", f"test buffer bound to node {node} failed: {e}",
                         "allow set_mempolicy/mbind (containers: seccomp, cpuset.mems)"), None
        try:
            rep = buf.report()
        finally:
            buf.close()
        coverage = rep["huge_page_coverage"] if coverage is None else min(coverage, rep["huge_page_coverage"])
        results.append((node, rep["numa_pages"], rep["policy_achieved"]))
    bad = [(n, pages) for n, pages, ok in results if not ok]
    value = "; ".join(f"bind node {n}: pages {pages}" for n, pages, _ in results) + note
    if bad:
        return Check("numa_placement", "warn", value,
                     "check cpuset.mems / numactl limits: pages landed off the bound node"), coverage
    unplaced = [d.address for d in topology.devices if d.numa_node is None]
    if unplaced and topology.source == "sysfs":
        # numa_node -1: firmware gives no affinity, so nothing can bind a pool next to the device.
        return Check("numa_placement", "warn", value + f"; no NUMA affinity for {', '.join(unplaced)}",
                     "BIOS: enable ACPI NUMA affinity (_PXM) for PCIe; or echo <node> > "
                     "/sys/bus/pci/devices/<addr>/numa_node"), coverage
    return Check("numa_placement", "ok", value, ""), coverage


PROCESS_FIX = ("start hicache (and the server) from a shell whose launcher does not call prctl(PR_SET_THP_DISABLE): "
               "grep THP_enabled /proc/self/status must say 1")


def _process_status(paths: HostPaths) -> str:
    return os.path.join(paths.proc_root, "self/status")


def check_thp_anon(paths: HostPaths) -> Check:
    path = os.path.join(paths.sys_root, "kernel/mm/transparent_hugepage/enabled")
    mode = vm.thp_mode(path)
    why = vm.thp_disabled_reason(False, path, _process_status(paths))  # the warning allocate_host gives
    fix = PROCESS_FIX if vm.thp_process_disabled(_process_status(paths)) else f"echo madvise > {path}"
    if mode is None:
        text = _read(path)
        what = "unreadable" if text is None else f"selects no mode in brackets (reads {text.strip()[:40]!r})"
        return Check("thp_anon", "unknown", f"{path} {what}" + (f" ({why})" if why else ""), fix)
    if why:
        return Check("thp_anon", "warn", f"enabled={mode}: anonymous host pools fault in on 4 KB pages ({why}); "
                     "SGLang's pools stay on them, where only MADV_COLLAPSE (Linux >= 6.1, which hal.memory.host "
                     "applies) moves a pool onto 2 MB pages", fix)
    why = "every anonymous mapping" if mode == "always" else "mappings that madvise (hal.memory.host does)"
    return Check("thp_anon", "ok", f"enabled={mode}: 2 MB pages for {why}", "")


def check_thp_shmem(paths: HostPaths) -> Check:
    """Shared pools (the TP-shared host pool) live in /dev/shm: huge pages there need the tmpfs
    huge= mount option (or shmem_enabled=force); shmem_enabled=deny turns them off everywhere.
    The verdict is hal.memory.shm's, the one allocate_host(shared_dir=...) warns with."""
    path = os.path.join(paths.sys_root, "kernel/mm/transparent_hugepage/shmem_enabled")
    mounts = os.path.join(paths.proc_root, "mounts")
    try:
        hp = shm.shared_huge_pages(paths.shm_dir, mounts=mounts, shmem_enabled_path=path)
    except OSError as e:
        return Check("thp_shmem", "unknown", f"{mounts} unreadable: {e.strerror}",
                     f"run where {mounts} can be read")
    value = (f"shmem_enabled={hp.shmem_enabled or 'unreadable'}; {paths.shm_dir}: "
             f"{hp.fstype} at {hp.mount_point} huge={hp.huge}") + (f" ({hp.warning})" if hp.warning else "")
    if vm.thp_process_disabled(_process_status(paths)):
        # No mount option or sysfs mode helps while the process itself has THP off.
        return Check("thp_shmem", "warn", f"{value}; {vm.PROCESS_DISABLED}", PROCESS_FIX)
    if hp.problem == "deny":
        return Check("thp_shmem", "warn", value, f"echo advise > {path}")
    if hp.problem == "not_tmpfs":
        return Check("thp_shmem", "warn", value, f"mount -t tmpfs -o huge=advise tmpfs {paths.shm_dir}")
    ok = hp.problem is None
    if paths.real and os.path.isdir(paths.shm_dir):
        measured = _shared_coverage(paths.shm_dir)
        if measured is not None:
            value += f"; measured: {measured:.0%} of a {fmt_bytes(TEST_BUFFER_BYTES)} shared test buffer on 2 MB pages"
            if ok and measured < 0.5:
                return Check("thp_shmem", "warn", value + " (configured, but the kernel gave 4 KB pages)",
                             "echo 1 > /proc/sys/vm/compact_memory  (free 2 MB blocks are short)")
            if hp.problem == "no_huge" and measured >= vm.WELL_COVERED:
                return Check("thp_shmem", "ok", value + " (faults give 4 KB pages; MADV_COLLAPSE, which "
                             "hal.memory.host applies before registering, moved them onto 2 MB pages)", "")
    fix = f"mount -o remount,huge=advise {hp.mount_point}  (and huge=advise in its /etc/fstab line)"
    if hp.shmem_enabled is None:
        return Check("thp_shmem", "unknown", value, fix)
    return Check("thp_shmem", "ok" if ok else "warn", value, "" if ok else fix)


def _shared_coverage(directory: str) -> float | None:
    try:
        from hal.memory.host import allocate_host

        buf = allocate_host(TEST_BUFFER_BYTES, huge_pages=True, shared_dir=directory)
    except (ImportError, OSError, ValueError, MemoryError):
        return None
    try:
        return float(buf.report()["huge_page_coverage"])
    finally:
        buf.close()


def check_page_table_entries(pool_bytes: int, coverage: float | None, thp_mode: str | None) -> Check:
    """Page-table entries the pool needs at 4 KB vs 2 MB pages, and what to expect here: the
    measured coverage of the test buffer, or the THP mode when nothing was measured."""
    n4k, n2m = -(-pool_bytes // PAGE_4K), -(-pool_bytes // PAGE_2M)
    if coverage is None:
        coverage = 0.0 if thp_mode in (None, "never") else 1.0
        how = f"assumed from THP mode {thp_mode}"
    else:
        how = "measured on the test buffer"
    expected = int(n4k * (1 - coverage) + n2m * coverage)
    value = (f"{fmt_bytes(pool_bytes)} pool: {n4k:,} PTEs at 4 KB ({fmt_bytes(n4k * PTE_BYTES)} of tables) "
             f"vs {n2m:,} at 2 MB; expected {expected:,} with {coverage:.0%} huge-page coverage ({how})")
    if coverage < 0.99 and pool_bytes >= GIB:
        return Check("page_table_entries", "warn", value,
                     "back the pool with 2 MB pages: THP enabled=madvise|always and madvise before first touch")
    return Check("page_table_entries", "ok", value, "")


def cap_ipc_lock(proc_root: str = "/proc") -> bool | None:
    for line in (_read(os.path.join(proc_root, "self/status")) or "").splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_IPC_LOCK & 1)
    return None


def check_memlock(pool_bytes: int, limit: int | None, ipc_lock: bool | None) -> Check:
    """Pinning the pool for DMA (and RDMA registration) counts against RLIMIT_MEMLOCK unless the
    process holds CAP_IPC_LOCK. limit None = unlimited."""
    shown = "unlimited" if limit is None else fmt_bytes(limit)
    fix = "ulimit -l unlimited  (memlock unlimited in /etc/security/limits.conf; LimitMEMLOCK=infinity under systemd)"
    if ipc_lock:
        return Check("memlock", "ok", f"limit {shown}; CAP_IPC_LOCK held, so the limit does not apply", "")
    if limit is None or limit >= pool_bytes:
        return Check("memlock", "ok", f"limit {shown} >= pool {fmt_bytes(pool_bytes)}", "")
    return Check("memlock", "fail", f"limit {shown} < pool {fmt_bytes(pool_bytes)}: pinning the pool will fail", fix)


def memlock_limit() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else soft


def check_registered_size(profile: Any, pool_bytes: int) -> Check:
    seconds = None if profile is None else profile.link.registration_seconds(pool_bytes)
    cost = (f"modeled registration {seconds:.1f} s ({profile.name})" if seconds is not None
            else "registration time not modeled" + (f" by profile {profile.name}" if profile else " (no --profile)"))
    value = f"registering {fmt_bytes(pool_bytes)}: {cost}"
    if pool_bytes > REGISTERED_WARN_BYTES:
        return Check("registered_size", "warn",
                     value + "; seed work: 80 GB registered slowed the workload +20.6%, 15 GB +8.8%",
                     f"register at most ~{fmt_bytes(REGISTERED_WARN_BYTES)} (a bounded staging window), not the whole pool")
    return Check("registered_size", "ok", value, "")


# -- the whole run -------------------------------------------------------------------------------


def _drives_hardware(backend: str, profile: Any) -> bool:
    """Whether backend `backend` drives real devices here, from its capabilities (hal.topology)."""
    from hal.backend import backend_class

    try:
        cls = backend_class(backend)
    except ImportError:  # a backend whose module cannot import here drives nothing
        return False
    return bool(cls.probe()[0]) and has_hardware(cls(profile).capabilities())


def run_doctor(backend: str = "emu", profile: Any = None, pool_bytes: int | None = None,
               paths: HostPaths = HostPaths()) -> DoctorReport:
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
