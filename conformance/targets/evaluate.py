"""Which measurer evaluates which metric, and the per-run context they share.

Every metric of hardware_profiles.METRICS has a measurer here (a test checks it), so no target
of any profile is silently left out; `evaluate(target, ctx)` returns the target's report row.
"""

from __future__ import annotations

from conformance.targets import host_measurers, link_measurers
from conformance.targets.judgment import judge, not_measured

MEASURERS = {
    "plan_segments_layer_first_seed": link_measurers.plan_segments("layer_first"),
    "plan_segments_page_first_direct_seed": link_measurers.plan_segments("page_first_direct"),
    "plan_seconds_seed": link_measurers.plan_seconds,
    "h2d_gbps": link_measurers.gbps("h2d"),
    "d2h_gbps": link_measurers.gbps("d2h"),
    "transfer_ratio_vs_memcpy": link_measurers.ratio_vs_memcpy,
    "per_card_host_gib_local": host_measurers.per_card_host_gib_local,
    "host_pool_page_bytes": host_measurers.host_pool_page_bytes,
    "d2h_submit_block_s": host_measurers.d2h_submit_block_s,
    "ghost_entry_bytes": host_measurers.ghost_entry_bytes,
}


class TargetContext:
    """The backend under test (None when it is unavailable here, with the reason), the profile,
    the engine that replays what a target replays (hicache_ref.engines: the readings' seed
    scenario), and measurements shared between targets of one run (the bandwidth probe feeds three)."""

    def __init__(self, backend, profile, backend_reason: str = "", engine: str = "reference"):
        if backend is None and not backend_reason:
            raise ValueError("backend_reason: say why there is no backend")
        self.backend, self.profile, self.backend_reason, self.engine = backend, profile, backend_reason, engine
        self._memo: dict = {}

    def memo(self, key: str, fn):
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    def forget(self, *keys: str) -> None:
        """Drop measurements so the next memo() takes them again (a disturbed run retaken)."""
        for key in keys:
            self._memo.pop(key, None)


def evaluate(target, ctx: TargetContext) -> dict:
    """The report row of one target (conformance.targets.judgment.judge)."""
    measure = MEASURERS.get(target.metric)
    if measure is None:
        return judge(target, not_measured("measured", f"no measurer for metric {target.metric!r}"))
    return judge(target, measure(ctx, target))
