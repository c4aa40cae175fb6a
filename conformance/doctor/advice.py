"""`hicache doctor` configuration advice: binding policy, host pool size, write policy.

Advice comes after the host-side checks (conformance/doctor_checks.py) and uses the same
`Check` record; it is derived from the binding plans and the topology, not measured.
"""

from __future__ import annotations

from typing import Any

from conformance.doctor.checks import GIB, Check, fmt_bytes
from hal.topology.binding import BindingPlan, uplink_warnings
from hal.topology.model import Topology


def advise_binding(local: BindingPlan, interleave: BindingPlan, pool_bytes: int) -> Check:
    if not local.bindings:
        return Check("binding_policy", "unknown", "no accelerators: nothing to bind",
                     "run on the accelerator host, or pass --profile to plan for the profile's box")
    loc, inter = local.min_capacity(), interleave.min_capacity()
    nodes = sorted({n for b in local.bindings for n in b.nodes})
    value = (f"local: {fmt_bytes(loc)}/card on nodes {nodes} ({fmt_bytes(local.stranded_bytes())} on other nodes unused); "
             f"interleave: {fmt_bytes(inter)}/card over {len(interleave.bindings[0].nodes)} nodes; "
             f"pool {fmt_bytes(pool_bytes)}/card")
    if pool_bytes <= loc:
        return Check("binding_policy", "ok", value + " -> bind each card's pool to its local node",
                     "numa=('bind', [device node]) per card")
    if pool_bytes <= inter:
        return Check("binding_policy", "warn", value + " -> does not fit locally; interleave costs remote accesses",
                     f"shrink --pool-bytes to <= {fmt_bytes(loc)} for local binding, or interleave one TP-shared pool")
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
    hbm = None if profile is None else profile.device.hbm_gib
    if hbm is None:
        return Check("host_pool_size", "ok", f"--hicache-size {pool_bytes / 1e9:.0f} (GB per rank); device HBM unknown, "
                     "so the host:device ratio is not checked", f"--hicache-size {pool_bytes / 1e9:.0f}")
    ratio = pool_bytes / (float(hbm) * GIB)
    value = f"host pool {fmt_bytes(pool_bytes)} = {ratio:.1f}x device HBM {hbm:g} GiB"
    if ratio < 2:
        return Check("host_pool_size", "warn", value + ": L2 barely larger than L1 adds few hits",
                     "give the host pool at least 2x HBM (interleave, or more memory per node)")
    return Check("host_pool_size", "ok", value, f"--hicache-size {pool_bytes / 1e9:.0f}")
