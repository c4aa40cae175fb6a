"""What a replay engine is: one module of hicache_ref/engines/ (or a package's __init__) that
names its class `ENGINE`; the file's name is the engine's name (`--engine NAME`).

An engine replays a trace under a CacheSpec and returns the reference's figures (same keys), or
says why it cannot run here. It declares every spec field honoured or refused, so a new field is
a decision for each engine and an option it cannot run is refused by name, never ignored.
"""

from __future__ import annotations

import abc


class ReplayEngine(abc.ABC):
    """The contract; classes, not instances, are asked (an engine holds no state between replays)."""

    @classmethod
    @abc.abstractmethod
    def unavailable_reason(cls) -> str | None:
        """None when the engine can run here; otherwise why not, in one line (what to install)."""

    @classmethod
    @abc.abstractmethod
    def support(cls) -> dict:
        """{spec field path: Honoured | Refused} for every field (hicache_ref.spec.engine_support)."""

    @classmethod
    @abc.abstractmethod
    def replay(cls, spec, trace, limit: int | None, off: bool | None) -> dict:
        """The figures of `spec` over `trace` (its first `limit` requests), priced against HiCache off
        (hicache_ref.sim.run.baseline), or not priced when `off` is False. Called only after the
        spec passed `support` and the engine is available."""
