"""Replays of one trace, each run once: keyed by everything that decides a replay's figures.

The profile only prices a replay (hicache_ref.sim.price.cost), so specs that differ in the profile
alone share one replay, and so do the profiles of a side-by-side comparison.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.run.served_replay import replay_served
from hicache_ref.spec import CacheSpec


def replay_key(spec: CacheSpec) -> str:
    """What a replay of `spec` depends on: the resolved spec less its profile."""
    d = spec.to_dict()
    d.pop("profile", None)
    d.pop("backend", None)
    return json.dumps(d, sort_keys=True, default=str)


class Replays:
    """`figures(spec)`: the replay of `spec` over `requests`, run the first time it is asked for."""

    def __init__(self, requests: list, progress: Callable[[int], None] | None = None):
        self.requests = list(requests)
        self.progress = progress
        self._figs: dict[str, dict] = {}

    @property
    def count(self) -> int:
        return len(self._figs)

    def figures(self, spec: CacheSpec) -> dict:
        key = replay_key(spec)
        if key not in self._figs:
            run = replay_served if spec.serving.concurrency is not None else replay
            self._figs[key] = run(spec, self.requests, off=False)  # priced by the advisor against its one off run
            if self.progress is not None:
                self.progress(len(self._figs))
        return self._figs[key]
