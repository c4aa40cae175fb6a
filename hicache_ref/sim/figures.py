"""The figures a replay reports, shared by the serial and the served replay (hicache_ref.sim.replay,
hicache_ref.sim.serving): totals and hit rate, per-direction transfer counters, what L2 hits save,
and the configuration echoed beside them (flat keys as before, the resolved spec under "spec").
"""

from __future__ import annotations

from hal.transfer.direction import POOL_DIRECTIONS


def run_config(spec, backend, l1: int, l2: int) -> dict:
    """The configuration keys of a replay's figures: capacities as run, switches, the resolved spec."""
    t = spec.tiers
    return dict(page_size=spec.page_size, l1_tokens=l1, l2_tokens=l2, l1_unlimited=t.l1_tokens is None,
                l2_unlimited=t.l2_tokens is None, write_policy=t.write_policy, host_layout=t.host_layout,
                materialize=t.materialize, pd_disagg=spec.serving.pd_disagg, **spec.semantics_config(),
                effective_host_layout=spec.effective_host_layout,
                profile=getattr(getattr(backend, "profile", None), "name", spec.profile),
                geometry=spec.geometry.config(), spec=spec.to_dict())


def add_saved(saved: float | None, compute, res, over_l1: bool = True) -> float | None:
    """Modeled prefill seconds the request's hits save, added to `saved`; None once the profile
    cannot say. over_l1 (HiCache's gain, what net benefit counts): what its L2 and L3 hits save
    beyond an L1-only cache, prefill(n - l1_hit) - prefill(n - l1_hit - l2_hit - l3_hit), taking
    L1's contents with and without the lower tiers as equal (hicache_ref.sim.cost). Else every hit:
    prefill(n) - prefill(n - hit)."""
    if saved is None:
        return None
    lower = res.l2_hit_tokens + res.l3_hit_tokens
    before = res.input_tokens - res.l1_hit_tokens if over_l1 else res.input_tokens
    hit = lower if over_l1 else res.l1_hit_tokens + lower
    if not hit:
        return saved
    full, rest = compute.prefill_seconds(before), compute.prefill_seconds(before - hit)
    return None if full is None or rest is None else saved + full - rest


def figures(t: dict, cache, wall: float, read_seconds: float, saved, ghost_list, config: dict) -> dict:
    """The figures every replay reports: totals, hit rate, per-direction transfers, timings, config."""
    out = dict(t)
    hits = t["l1_hit_tokens"] + t["l2_hit_tokens"] + t.get("l3_hit_tokens", 0)
    out["hit_rate"] = hits / t["input_tokens"] if t["input_tokens"] else 0.0
    ctl = cache.controller.stats() if cache.controller is not None else None
    for d in POOL_DIRECTIONS:
        s = getattr(ctl, d) if ctl is not None else None
        out[f"{d}_tokens"] = s.tokens if s else 0
        out[f"{d}_bytes"] = s.bytes if s else 0
        out[f"{d}_segments"] = s.segments if s else 0
        out[f"{d}_transfers"] = s.transfers if s else 0
        out[f"{d}_launches"] = s.launches if s else 0
        out[f"modeled_{d}_seconds"] = s.modeled_seconds if s else 0.0
        out[f"max_{d}_enqueue_seconds"] = s.max_enqueue_seconds if s else 0.0
    out["modeled_transfer_seconds"] = ctl.modeled_seconds if ctl is not None else 0.0
    out["modeled_prefill_seconds_saved"] = saved
    out["wall_seconds"] = wall
    out["read_seconds"] = read_seconds
    out["tokens_per_second"] = t["input_tokens"] / wall if wall > 0 else None
    if ghost_list is not None:
        out["ghost"] = ghost_list.report()
    out.update(config)
    return out
