"""A readings file's scenario as runs: each named state as a cache spec plus a host state.

A state (hardware_profiles/readings/<profile>.yaml, `states`) says which of the seed's fixes are on.
The cache side (layout, hit counting, ghost list, TP-shared capacity) is replayed; the host side
(submission thread, page size, NUMA, IDO, registered bytes) is priced (hicache_ref.sim.mechanisms).
Replays depend only on the cache side, so each is run once and priced under any parameters.
"""

from __future__ import annotations

from hal.transfer.seed import SEED_GEOMETRY
from hicache_ref.sim.mechanisms import PAGE_4K, PAGE_THP, HostState
from hicache_ref.sim.serving import replay_served
from hicache_ref.spec import CacheSpec

IO_BACKEND = {"page_first_direct": "direct", "layer_first": "kernel"}  # the seed's copy ops per layout


def l2_tokens_per_card(gb: float, page_size: int = 64) -> int:
    """Whole pages of seed-geometry KV in `gb` decimal GB."""
    return int(gb * 1e9) // SEED_GEOMETRY.token_bytes // page_size * page_size


def cache_key(state: dict, l2_gb: float) -> tuple:
    """What a replay of `state` depends on (its host-side switches are priced, not replayed)."""
    if not state["hicache"]:
        return ("off",)
    return (state["host_layout"], state["hit_count"], state["ghost"], state["tp_shared"], float(l2_gb))


def cache_spec(state: dict, scenario: dict, l2_gb: float, profile: str) -> CacheSpec:
    """The spec one rank replays in `state`: the scenario's L1, L2 of `l2_gb` per card (the TP
    group's whole pool when shared; none when HiCache is off), PD prefill at its concurrency."""
    tp = scenario["tp"]
    per_card = l2_tokens_per_card(l2_gb)
    l2 = 0 if not state["hicache"] else per_card * (tp if state["tp_shared"] else 1)
    layout = state["host_layout"]
    return CacheSpec.of(profile=profile, l1_tokens=scenario["l1_tokens"], l2_tokens=l2,
                        host_layout=layout, io_backend=IO_BACKEND[layout], write_policy="write_through_selective",
                        hit_count=state["hit_count"], ghost=state["ghost"], pd_disagg=scenario["pd_disagg"],
                        concurrency=scenario["concurrency"])


def host_state(state: dict, scenario: dict, l2_gb: float, profile) -> HostState:
    """The host side of `state`: each card registers its own pool, or the whole shared one."""
    tp, per_switch = scenario["tp"], (profile.topology.devices_per_switch if profile.topology else None) or 1
    registered = 0
    if state["hicache"]:
        registered = l2_tokens_per_card(l2_gb) * SEED_GEOMETRY.token_bytes * (tp if state["tp_shared"] else 1)
    return HostState(submission=state["submission"], host_page_bytes=PAGE_THP if state["host_pages"] == "thp" else PAGE_4K,
                     numa=state["numa"], ido=state["ido"], writers_per_uplink=1 if state["tp_shared"] else per_switch,
                     registered_bytes=registered, numa_nodes=profile.host.numa_nodes or 1)


class ScenarioRuns:
    """Replays of a scenario's states over one trace, each run once (figures by cache_key)."""

    def __init__(self, scenario: dict, requests, profile_name: str, progress=None):
        self.scenario, self.requests, self.profile_name = scenario, list(requests), profile_name
        self._figs: dict[tuple, dict] = {}
        self.progress = progress

    def figures(self, state: dict, l2_gb: float) -> dict:
        key = cache_key(state, l2_gb)
        if key not in self._figs:
            self._figs[key] = replay_served(cache_spec(state, self.scenario, l2_gb, self.profile_name), self.requests)
            if self.progress is not None:
                self.progress(len(self._figs))
        return self._figs[key]
