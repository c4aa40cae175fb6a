"""`hicache doctor`'s host_memory check: do the host KV pools fit in this host's memory at all.

The pool is per card, so the host must hold one per accelerator (one on a host without any):
more than MemTotal can never be allocated (fail; a warning for doctor's own default size),
more than MemAvailable only once other memory is freed (warn). Where the cards' NUMA nodes are known, a node whose memory is less
than the pools of its own cards is named (local binding cannot hold them there; binding_policy
says what interleaving gives). An emulated topology (a profile's box on another machine) is
not this host: the check then says unknown and leaves the box to binding_policy.
"""

from __future__ import annotations

import os

from conformance.doctor.records import Check, fmt_bytes
from hal.memory import budget
from hal.topology.topology_model import Topology

NAME = "host_memory"


def read_meminfo(proc_root: str = "/proc") -> dict[str, int]:
    """MemTotal and MemAvailable (bytes) from <proc_root>/meminfo; {} for what it does not say."""
    out: dict[str, int] = {}
    try:
        with open(os.path.join(proc_root, "meminfo"), encoding="ascii", errors="replace") as f:
            for line in f:
                parts = line.split()  # "MemTotal:       24684084 kB"
                if len(parts) >= 3 and parts[0] in ("MemTotal:", "MemAvailable:") and parts[1].isdigit():
                    out[parts[0][:-1]] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def check_host_memory(topology: Topology, pool_bytes: int, proc_root: str = "/proc", assumed: bool = False,
                      cgroup_root: str = budget.CGROUP_ROOT) -> Check:
    """host_memory: `pool_bytes` per card against this host's MemTotal, MemAvailable, the room its
    cgroup memory limit leaves (a container's: what the pools past it get is the OOM killer) and
    NUMA nodes. `assumed`: the size is doctor's default, not asked for: too large is then a warning."""
    if topology.source != "sysfs":
        return Check(NAME, "unknown", f"topology from {topology.source} ({topology.origin}), not this host's: "
                     "its memory is checked by binding_policy", "run doctor on the accelerator host")
    mem = read_meminfo(proc_root)
    if "MemTotal" not in mem:
        return Check(NAME, "unknown", f"{os.path.join(proc_root, 'meminfo')} gives no MemTotal: host memory unknown",
                     "run doctor where /proc is mounted")
    cards = max(1, len(topology.devices))
    need = pool_bytes * cards
    total, avail = mem["MemTotal"], mem.get("MemAvailable", mem["MemTotal"])
    pools = f"{cards} pool(s) of {fmt_bytes(pool_bytes)} = {fmt_bytes(need)}" if cards > 1 else \
        f"pool {fmt_bytes(pool_bytes)}"
    value = f"{pools}; MemTotal {fmt_bytes(total)}, MemAvailable {fmt_bytes(avail)}"
    fix = f"--pool-bytes <= {fmt_bytes(avail // cards)} (MemAvailable{f' / {cards} cards' if cards > 1 else ''})"
    if need > total:
        return Check(NAME, "warn" if assumed else "fail",
                     value + " -> more than this host's memory: it cannot be allocated", fix)
    room = budget.cgroup_room(os.path.join(proc_root, "self/cgroup"), cgroup_root)
    if room is not None and need > room:
        return Check(NAME, "warn" if assumed else "fail",
                     f"{value}; room under this process's cgroup memory limit {fmt_bytes(room)} -> more than the "
                     "limit leaves: the OOM killer ends the process that pre-faults the pools",
                     f"--pool-bytes <= {fmt_bytes(room // cards)} (the cgroup's room{f' / {cards} cards' if cards > 1 else ''}), "
                     "or raise the container's memory limit (memory.max; memory.limit_in_bytes on cgroup v1)")
    short = _short_nodes(topology, pool_bytes)
    if need > avail:
        return Check(NAME, "warn", value + " -> more than is available now: free memory first" + short, fix)
    if short:
        return Check(NAME, "warn", value + short, "interleave the pools (binding_policy), or " + fix)
    return Check(NAME, "ok", value, "")


def _short_nodes(topology: Topology, pool_bytes: int) -> str:
    """'; node 1: 2 local pools (...) > its 64.0 GiB' for each node whose own cards' pools exceed its memory."""
    per_node: dict[int, int] = {}
    for d in topology.devices:
        if d.numa_node is not None:
            per_node[d.numa_node] = per_node.get(d.numa_node, 0) + 1
    parts = []
    for node_id, n in sorted(per_node.items()):
        try:
            node_bytes = topology.node(node_id).memory_bytes
        except ValueError:  # a device on a node the source does not list
            continue
        if node_bytes and n * pool_bytes > node_bytes:
            parts.append(f"node {node_id}: {n} local pool(s) = {fmt_bytes(n * pool_bytes)} > its {fmt_bytes(node_bytes)}")
    return ("; " + "; ".join(parts) + " (local binding cannot hold them)") if parts else ""
