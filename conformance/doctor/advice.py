"""`hicache doctor` configuration advice: binding policy, host pool size, write policy.

Advice comes after the host-side checks (run in order by conformance/doctor/checks.py) and uses
the same `Check` record; it is derived from the binding plans and the topology, not measured.
"""

from __future__ import annotations

from typing import Any

from conformance.doctor.records import GIB, Check, fmt_bytes
from hal.topology.binding import BindingPlan, uplink_warnings
from hal.topology.topology_model import Topology


def advise_binding(local: BindingPlan, interleave: BindingPlan, pool_bytes: int,
                   memory_unknown: str | None = None, shared: BindingPlan | None = None) -> Check:
    """Local vs interleaved binding for a pool of `pool_bytes` per card, and (`shared`, the
    interleave plan of one TP-shared pool) whether one pool for the TP group would hold it.
    `memory_unknown` says why the host memory behind the plans is not known (a profile without
    it): then so is the advice."""
    if memory_unknown:
        return Check("binding_policy", "unknown", f"{memory_unknown}: capacity per card unknown; "
                     f"pool {fmt_bytes(pool_bytes)}/card not checked",
                     "give host.numa_nodes and host.memory_per_node_gib in the profile, or run doctor on that host")
    if not local.bindings:
        return Check("binding_policy", "unknown", "no accelerators: nothing to bind",
                     "run on the accelerator host, or pass --profile to plan for the profile's box")
    loc, inter = local.min_capacity(), interleave.min_capacity()
    nodes = sorted({n for b in local.bindings for n in b.nodes})
    value = (f"local: {fmt_bytes(loc)}/card on nodes {nodes} ({fmt_bytes(local.stranded_bytes())} on other nodes unused); "
             f"interleave: {fmt_bytes(inter)}/card over {len(interleave.bindings[0].nodes)} nodes; "
             f"pool {fmt_bytes(pool_bytes)}/card")
    whole = shared.min_capacity() if shared is not None else None
    if whole is not None:
        value += f"; one TP-shared pool: {fmt_bytes(whole)} seen whole by every card"
    if pool_bytes <= loc:
        return Check("binding_policy", "ok", value + " -> bind each card's pool to its local node",
                     "numa=('bind', [device node]) per card")
    if pool_bytes <= inter:
        return Check("binding_policy", "warn", value + " -> does not fit locally; interleave costs remote accesses",
                     f"shrink --pool-bytes to <= {fmt_bytes(loc)} for local binding, or interleave one TP-shared pool")
    if whole is not None and pool_bytes <= whole:
        return Check("binding_policy", "warn", value + " -> fits only as one TP-shared pool (MLA/NSA host KV is "
                     "the same on every rank: one copy for the group, rank 0 writes it)",
                     f"share one interleaved host pool across the TP group, or --pool-bytes <= {fmt_bytes(inter)}")
    return Check("binding_policy", "fail", value + " -> does not fit in host memory under any policy",
                 f"--pool-bytes <= {fmt_bytes(inter)} (interleaved) or <= {fmt_bytes(loc)} (local)")


def advise_write_policy(topology: Topology) -> Check:
    """Every backed-up page crosses the uplink D2H; on a shared uplink without IDO that traffic
    competes with the neighbour's loads, so back up only pages that are hit again."""
    warns = uplink_warnings(topology)
    if warns:
        return Check("write_policy", "warn", f"{len(warns)} shared uplink(s) without IDO on: write_through_selective "
                     "backs up only re-hit pages, cutting D2H traffic on them", "--hicache-write-policy write_through_selective")
    return Check("write_policy", "ok", "no shared uplink without IDO: write_through is fine",
                 "--hicache-write-policy write_through")


def advise_pool_size(profile: Any, pool_bytes: int) -> Check:
    """SGLang's --hicache-size (whole GB per rank) for the pool, and the host:device ratio."""
    size_gb = pool_bytes // 10**9
    if size_gb < 1:  # --hicache-size 0 means "size by --hicache-ratio", not a tiny pool
        return Check("host_pool_size", "warn", f"host pool {fmt_bytes(pool_bytes)} is under 1 GB, the smallest "
                     "--hicache-size (whole GB; 0 would mean: size the pool by --hicache-ratio)",
                     "give --pool-bytes of at least 1G")
    hbm = None if profile is None else profile.device.hbm_gib
    if hbm is None:
        return Check("host_pool_size", "ok", f"--hicache-size {size_gb} (GB per rank); device HBM unknown, "
                     "so the host:device ratio is not checked", f"--hicache-size {size_gb}")
    ratio = pool_bytes / (float(hbm) * GIB)
    value = f"host pool {fmt_bytes(pool_bytes)} = {ratio:.2g}x device HBM {hbm:g} GiB"
    fix = "give the host pool at least 2x HBM (interleave, or more memory per node)"
    if ratio < 1:
        return Check("host_pool_size", "warn", value + ": L2 is smaller than L1, so it holds little that L1 "
                     "does not; few extra hits", fix)
    if ratio < 2:
        return Check("host_pool_size", "warn", value + ": L2 barely larger than L1 adds few hits", fix)
    return Check("host_pool_size", "ok", value, f"--hicache-size {size_gb}")
