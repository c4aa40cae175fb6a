"""The sglang engine as hicache_ref.engines picks it: SGLang's HiCache replaying under a CacheSpec."""

from __future__ import annotations

from hicache_ref.engines.base import ReplayEngine
from hicache_ref.engines.sglang.pin import unavailable_reason


class SGLangEngine(ReplayEngine):
    @classmethod
    def unavailable_reason(cls) -> str | None:
        return unavailable_reason()

    @classmethod
    def support(cls) -> dict:
        from hicache_ref.engines.sglang.support import SUPPORT

        return SUPPORT

    @classmethod
    def replay(cls, spec, trace, limit: int | None, off: bool | None) -> dict:
        from hicache_ref.engines.sglang.engine_replay import replay_sglang
        from hicache_ref.spec.capacity_check import check_capacity

        check_capacity(spec)
        if spec.tp.ranks is None:
            fig = replay_sglang(spec, trace, limit, off=off)
        else:  # one rank stands for the group, as the reference's TP replay (engine_replay says why)
            from hicache_ref.sim.run.tp_replay import tp_group_figures

            fig = tp_group_figures(spec, replay_sglang(spec.tp_rank(), trace, limit, off=off))
        if spec.host_sizing is not None:
            fig["host_sizing"] = spec.host_sizing
        return fig
