"""The reference engine: hicache_ref's own cache (hicache_ref.sim.run) replays the trace."""

from __future__ import annotations

from hicache_ref.engines.base import ReplayEngine


class ReferenceEngine(ReplayEngine):
    @classmethod
    def unavailable_reason(cls) -> str | None:
        return None  # pure Python on the HAL: runs wherever the harness does

    @classmethod
    def support(cls) -> dict:
        from hicache_ref.engines.reference_support import SUPPORT

        return SUPPORT

    @classmethod
    def replay(cls, spec, trace, limit: int | None, off: bool | None) -> dict:
        from hicache_ref.sim.run.replay_dispatch import run_replay

        return run_replay(spec, trace, limit, off=off)


ENGINE = ReferenceEngine
