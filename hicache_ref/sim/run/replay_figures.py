"""The figures a replay reports, shared by the serial and the served replay (hicache_ref.sim.run.serial_replay,
hicache_ref.sim.run.served_replay): totals and hit rate, per-direction transfer counters, what L2 hits save,
and the configuration echoed beside them (flat keys, and the resolved spec under "spec").
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


class ComputeTally:
    """Modeled prefill seconds of the requests replayed, three ways: as cached (`compute`: each
    request's uncached tokens, its L1, L2 and L3 hits on the device), with L1 hits only
    (`l1_only`: this run's L1 hits alone; net benefit is counted against HiCache off, its own L1-alone
    replay, hicache_ref.sim.run.baseline)
    and with no cache (`no_cache`); `l2_hit_requests`: requests that loaded from L2 or L3. All
    None once the profile cannot say (no compute model)."""

    def __init__(self, compute_model):
        self.model = compute_model
        known = compute_model is not None and compute_model.known
        self.compute = self.l1_only = self.no_cache = 0.0 if known else None
        self.l2_hit_requests = 0
        # prompts, new tokens, n^2 - c^2: prefill of a linear + pair model is linear in these, so
        # a run can be priced again under other compute parameters (hicache_ref.sim.fit.derive)
        self.moments = {k: [0, 0, 0] for k in ("compute", "l1_only", "no_cache")}

    def add(self, res) -> None:
        """Count one request's result (hicache_ref.core.cache.RequestResult)."""
        lower = res.l2_hit_tokens + res.l3_hit_tokens
        self.l2_hit_requests += bool(lower)
        n = res.input_tokens
        for key, c in (("compute", min(n, res.l1_hit_tokens + lower)), ("l1_only", min(n, res.l1_hit_tokens)),
                       ("no_cache", 0)):
            m = self.moments[key]
            m[0] += n > 0
            m[1] += n - c
            m[2] += n * n - c * c
        if self.compute is None:
            return
        m, n = self.model, res.input_tokens
        self.compute += m.prefill_seconds(n, min(n, res.l1_hit_tokens + lower))
        self.l1_only += m.prefill_seconds(n, min(n, res.l1_hit_tokens))
        self.no_cache += m.prefill_seconds(n)

    @property
    def saved_over_l1(self) -> float | None:
        """What this run's L2 and L3 hits save over its own L1 hits (a figure; net benefit's compute side
        is taken against HiCache off, hicache_ref.sim.price.cost.against_off)."""
        return None if self.compute is None else self.l1_only - self.compute

    def to_json(self) -> dict:
        saved_all = None if self.compute is None else self.no_cache - self.compute
        return {"modeled_prefill_seconds_saved": self.saved_over_l1, "modeled_prefill_compute_seconds": self.compute,
                "modeled_prefill_l1_only_seconds": self.l1_only, "baseline_prefill_seconds": self.no_cache,
                "prefix_cache_compute_saved_seconds": saved_all, "l2_hit_requests": self.l2_hit_requests,
                "prefill_moments": {k: list(v) for k, v in self.moments.items()}}


def figures(t: dict, cache, wall: float, read_seconds: float, tally: ComputeTally, ghost_list, config: dict) -> dict:
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
    out.update(tally.to_json())
    out["wall_seconds"] = wall
    out["read_seconds"] = read_seconds
    out["tokens_per_second"] = t["input_tokens"] / wall if wall > 0 else None
    if ghost_list is not None:
        out["ghost"] = ghost_list.report()
    out.update(config)
    return out


def count_request(totals: dict, res) -> None:
    """Add one request's result to a replay's running totals: the counts every engine's request
    result spells alike (an engine adds its own beyond these)."""
    totals["requests"] += 1
    totals["truncated_requests"] += res.truncated
    for key in ("input_tokens", "l1_hit_tokens", "l2_hit_tokens", "l2_unloaded_tokens"):
        totals[key] += getattr(res, key)
