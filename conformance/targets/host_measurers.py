"""Measurers of the host-side targets, each on something real in this run: the page size and
THP coverage of a host KV pool the reference cache allocates, per-card local host memory from the
backend's topology, ghost-list bytes per entry on a real GhostList, and how long the controller's
`write` holds the scheduler thread."""

from __future__ import annotations

import time

import numpy as np

from conformance.targets.judgment import Outcome, model_inputs, not_measured
from hal.memory import budget, vm
from hal.memory.host import COLLAPSE_CAUSES
from hal.topology.binding import plan_binding
from hal.transfer.seed import seed_geometry
from hicache_ref.core import ghost
from hicache_ref.core.controller import CacheController
from hicache_ref.core.pools import DevicePool, HostPool

POOL_TOKENS = 512  # 8 pages of the seed geometry: 46 MB, 22 huge pages
HUGE_PAGE, SMALL_PAGE = 2 << 20, 4096
# Collapse outcomes (hal.memory.host.COLLAPSE_CAUSES) that say the machine's free memory, not the pool, kept pages small.
MEMORY_SHORT = tuple(COLLAPSE_CAUSES)


def memory_short_reason(collapse: str) -> str:
    """What a MEMORY_SHORT outcome says and what to do: EBUSY is the cgroup's charge refused (its
    limit, not the machine, is short), ENOMEM no free memory to compact into, EAGAIN pages busy."""
    available, room = vm.memory_available_bytes(), budget.cgroup_room()
    seen = f"MemAvailable {'unknown' if available is None else budget.fmt(available)}" + (
        "" if room is None else f", room under this process's cgroup memory limit {budget.fmt(room)}")
    if collapse == "failed: EBUSY":
        return (f"this process's cgroup memory limit refused the 2 MiB pages' charge when the pool was made ({seen}); "
                "rerun with a higher cgroup memory limit (memory.max; memory.limit_in_bytes on cgroup v1)")
    if collapse == "failed: EAGAIN":
        return f"the pool's pages were busy (locked or migrating) when the pool was made ({seen}); rerun"
    return (f"this machine had too little free memory to compact into 2 MiB pages when the pool was made ({seen}); "
            "rerun with memory free, or after `echo 1 > /proc/sys/vm/compact_memory`")


def host_pool_page_bytes(ctx, target) -> Outcome:
    if ctx.backend is None:
        return not_measured("measured", ctx.backend_reason)
    pool = HostPool(seed_geometry(), POOL_TOKENS, "layer_first", backend=ctx.backend, materialize=True)
    try:
        report = pool.host_buffer.report()
    finally:
        pool.close()
    coverage = report["huge_page_coverage"]
    page = HUGE_PAGE if coverage >= vm.WELL_COVERED else SMALL_PAGE
    details = {"pool_bytes": report["mapped_bytes"], "thp_coverage": coverage, "thp_mode": vm.thp_mode(),
               "collapse": report["huge_page_collapse"], "registered_bytes": report["registered_bytes"],
               "warnings": report["warnings"]}
    why = (f"{coverage:.1%} of a {report['mapped_bytes'] >> 20} MiB host KV pool (hicache_ref.core.pools.HostPool, "
           f"registered with {ctx.backend.name}) is on 2 MiB pages (smaps)")
    if page == SMALL_PAGE and report["huge_page_collapse"] in MEMORY_SHORT:
        # The harness asked for huge pages and the moment's memory refused them: a fact of this
        # moment (or of the cgroup the run was given), not of the pool's configuration, so no verdict.
        return not_measured("measured", f"{why}; MADV_COLLAPSE {report['huge_page_collapse']}: "
                            + memory_short_reason(report["huge_page_collapse"]), **details)
    return Outcome(page, "measured", why + ("" if page == HUGE_PAGE else "; " + "; ".join(report["warnings"])),
                   details=details)


def per_card_host_gib_local(ctx, target) -> Outcome:
    if ctx.backend is None:
        return not_measured("measured", ctx.backend_reason)
    topology = ctx.backend.topology()
    plan = plan_binding(topology, "local")
    gib = plan.min_capacity() / 2**30
    details = {"topology_source": topology.source, "per_device_gib": [b.capacity_bytes / 2**30 for b in plan.bindings],
               "notes": list(topology.notes), "assumptions": list(plan.assumptions)}
    if not topology.devices:
        return not_measured("measured", f"topology ({topology.source}) has no devices", **details)
    if topology.source == "profile":
        return Outcome(gib, "modeled", "local binding planned (hal.topology.binding, 20% reserved) on the topology "
                       f"emulated from profile {ctx.profile.name}: " + "; ".join(topology.notes),
                       model_inputs(ctx.profile, "host.memory_per_node_gib"), details)
    return Outcome(gib, "measured", f"local binding planned on this machine's {topology.source} topology",
                   details=details)


def ghost_entry_bytes(ctx, target) -> Outcome:
    sample = 20_000
    value = ghost.measure_bytes_per_entry(sample)
    return Outcome(value, "measured", f"tracemalloc over a real GhostList filled with {sample:,} 64-bit hashes")


WRITE_TOKENS, WRITES = 512, 6


def d2h_submit_block_s(ctx, target) -> Outcome:
    """Longest time `CacheController.write` holds its caller (the scheduler thread) over a few
    seed-geometry backups of WRITE_TOKENS each, with real buffers on the backend under test."""
    if ctx.backend is None:
        return not_measured("measured", ctx.backend_reason)
    geom = seed_geometry()
    # every write backs up the same pages to the same host slots: the controller keeps them in
    # order, and the memory stays two pools of WRITE_TOKENS (46 MB each)
    dev = DevicePool(geom, WRITE_TOKENS, backend=ctx.backend, materialize=True)
    host = HostPool(geom, WRITE_TOKENS, "layer_first", backend=ctx.backend, materialize=True)
    blocks = []
    try:
        with CacheController(dev, host, ctx.backend) as ctl:
            dev_idx = np.arange(WRITE_TOKENS, dtype=np.int64)
            for _ in range(WRITES):
                t0 = time.perf_counter()
                ctl.write(dev_idx, dev_idx)
                blocks.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ctl.flush(timeout=120)
            drained = time.perf_counter() - t0
    finally:
        dev.close()
        host.close()
    nbytes = WRITE_TOKENS * geom.layout_dim
    return Outcome(max(blocks), "measured",
                   f"longest of {WRITES} CacheController.write calls ({nbytes / 1e6:.0f} MB each, all layers, "
                   f"layer_first) on {ctx.backend.name}; the copies finished {drained:.3f} s later on the D2H thread",
                   details={"block_s": blocks, "drain_s": drained, "bytes_per_write": nbytes})
