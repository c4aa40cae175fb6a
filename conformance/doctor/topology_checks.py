"""`hicache doctor`'s topology checks: PCIe ordering on shared uplinks, and NUMA placement measured.

pcie_ordering reads which devices share an uplink (hal.topology) and whether ID-based ordering is
on there; numa_placement binds a small test buffer to each device's node, reads back where its
pages landed (HostBuffer.report) and hands the buffer's huge-page coverage on to page_table_entries.
"""

from __future__ import annotations

from conformance.doctor.records import TEST_BUFFER_BYTES, Check
from hal.topology.topology_model import Topology


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
