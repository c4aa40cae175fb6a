"""Binding planner: which NUMA node(s) each device's host KV pool lives on, and how much memory that leaves.

`local` binds each pool to its device's node (shortest path, but nodes without a device stay
unused); `interleave` spreads pools over all nodes, and with `shared=True` one TP-shared pool gives
every device the whole usable memory. The fraction kept for the OS is an assumption the plan states.
"""

from __future__ import annotations

from typing import NamedTuple

from hal.checks import non_negative_int
from hal.topology.model import Topology

POLICIES = ("local", "interleave")
# 20% of each node kept for everything that is not the KV pool. With it, strict local binding on
# the p800 box gives the ~75 GB per card the seed work found (see tests/hal/test_binding.py).
RESERVE_FRACTION = 0.20


class DeviceBinding(NamedTuple):
    device: int
    nodes: tuple[int, ...]  # () when the device's NUMA node is unknown
    capacity_bytes: int  # host memory this device's pool may use under the policy

    def numa_arg(self, policy: str) -> tuple[str, list[int]] | None:
        """The `numa=` argument for hal.memory.host.allocate_host, None when nothing is known."""
        if not self.nodes:
            return None
        return ("bind" if policy == "local" else "interleave", list(self.nodes))


class BindingPlan(NamedTuple):
    policy: str
    bindings: tuple[DeviceBinding, ...]
    usable_bytes_per_node: dict[int, int]  # after the reservation
    warnings: tuple[str, ...]
    assumptions: tuple[str, ...]
    shared: bool = False  # one TP-shared pool: every binding's capacity is the whole pool

    def capacity(self, device: int) -> int:
        return self.bindings[device].capacity_bytes

    def min_capacity(self) -> int:
        return min((b.capacity_bytes for b in self.bindings), default=0)

    def stranded_bytes(self) -> int:
        """Usable memory on nodes no device binds to (what `local` leaves unused)."""
        used = {n for b in self.bindings for n in b.nodes}
        return sum(v for n, v in self.usable_bytes_per_node.items() if n not in used)


def _node_memory(topology: Topology, memory_per_node_bytes) -> dict[int, int]:
    if memory_per_node_bytes is None:
        mem = {n.id: n.memory_bytes for n in topology.numa_nodes}
    elif isinstance(memory_per_node_bytes, dict):
        unknown = sorted(set(memory_per_node_bytes) - set(topology.node_ids()))
        if unknown:
            raise ValueError(f"memory_per_node_bytes: node(s) {unknown} do not exist; nodes are {topology.node_ids()}")
        mem = {n.id: int(memory_per_node_bytes.get(n.id, n.memory_bytes)) for n in topology.numa_nodes}
    else:
        mem = {n.id: int(memory_per_node_bytes) for n in topology.numa_nodes}
    if any(v < 0 for v in mem.values()):
        raise ValueError(f"memory_per_node_bytes: must be >= 0, got {mem}")
    return mem


def plan_binding(
    topology: Topology,
    policy: str = "local",
    *,
    reserve_fraction: float = RESERVE_FRACTION,
    reserve_bytes: int = 0,
    memory_per_node_bytes: int | dict[int, int] | None = None,
    nodes: list[int] | tuple[int, ...] | None = None,
    shared: bool = False,
) -> BindingPlan:
    """Plan host-pool placement for every device of `topology` under `policy`.

    memory_per_node_bytes overrides what the topology says (one int for every node, or a dict per
    node): xpu-smi topologies do not know node memory. nodes: the interleave set, each node once (default all).
    shared: one TP-shared pool over the interleave set, which every device sees whole (interleave only).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    if not isinstance(shared, bool):
        raise ValueError(f"shared: expected True or False, got {shared!r}")
    if shared and policy != "interleave":
        raise ValueError("shared: a TP-shared pool is one pool interleaved over the nodes; use policy='interleave'")
    if not 0.0 <= float(reserve_fraction) < 1.0:
        raise ValueError(f"reserve_fraction: expected 0 <= f < 1, got {reserve_fraction!r}")
    reserve_bytes = non_negative_int("reserve_bytes", reserve_bytes)
    ids = topology.node_ids()
    if nodes is not None:
        nodes = list(nodes)
        missing = [n for n in nodes if isinstance(n, bool) or n not in ids]
        if missing or not nodes:
            raise ValueError(f"nodes: {nodes} must be a non-empty list of existing nodes {ids}")
        repeated = sorted({n for n in nodes if nodes.count(n) > 1})
        if repeated:
            # A repeated node would count its memory twice in the interleaved capacity.
            raise ValueError(f"nodes: node(s) {repeated} given more than once in {nodes}")
        if policy == "local":
            raise ValueError("nodes: only meaningful with policy='interleave'")
    mem = _node_memory(topology, memory_per_node_bytes)
    usable = {n: max(0, int(m * (1.0 - reserve_fraction)) - reserve_bytes) for n, m in mem.items()}
    for i, dev in enumerate(topology.devices):
        if dev.numa_node is not None and dev.numa_node not in ids:
            raise ValueError(f"topology: device {i} ({dev.address}) is on NUMA node {dev.numa_node}, not one of {ids}")

    warnings: list[str] = []
    bindings: list[DeviceBinding] = []
    if policy == "local":
        per_node: dict[int, int] = {}
        for dev in topology.devices:
            if dev.numa_node is not None:
                per_node[dev.numa_node] = per_node.get(dev.numa_node, 0) + 1
        for i, dev in enumerate(topology.devices):
            if dev.numa_node is None:
                warnings.append(f"device {i} ({dev.address}) has no known NUMA node: local binding cannot place it")
                bindings.append(DeviceBinding(i, (), 0))
                continue
            bindings.append(DeviceBinding(i, (dev.numa_node,), usable[dev.numa_node] // per_node[dev.numa_node]))
    else:
        pool_nodes = tuple(sorted(nodes)) if nodes is not None else tuple(ids)
        total = sum(usable[n] for n in pool_nodes)
        # One shared copy serves every device whole; private pools split the memory evenly.
        share = total if shared else total // len(topology.devices) if topology.devices else 0
        bindings = [DeviceBinding(i, pool_nodes, share) for i in range(len(topology.devices))]

    if not topology.devices:
        warnings.append(f"no accelerators in the topology ({topology.describe()})")
    if any(v == 0 for v in mem.values()):
        warnings.append("memory of some NUMA node(s) is unknown (0): pass memory_per_node_bytes")
    warnings.extend(uplink_warnings(topology))
    assumptions = (
        f"{reserve_fraction:.0%} of each node reserved for OS, page cache, runtime and weight staging",
        f"{reserve_bytes} more bytes reserved per node",
        "local: devices on one node split it evenly; interleave: " + (
            "one TP-shared pool (one host KV copy for the group) that every device sees whole" if shared
            else "one pool split evenly over all devices"),
    ) + tuple(n for n in topology.notes if n.startswith("assumed"))
    return BindingPlan(policy, tuple(bindings), usable, tuple(warnings), assumptions, shared)


def uplink_warnings(topology: Topology) -> list[str]:
    """One line per uplink that several devices share while IDO is not known to be on."""
    out = []
    for group, ido in topology.shared_uplinks():
        if ido != "on":
            names = "+".join(topology.devices[i].address for i in group)
            out.append(
                f"{names} share one uplink with PCIe ID-based ordering {ido}: their DMA completions are "
                "strictly ordered through the shared link, so one device's transfers can stall the other's"
            )
    return out
