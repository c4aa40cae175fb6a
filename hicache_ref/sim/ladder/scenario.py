"""A ladder state as runs: the cache side as a spec to replay, the host side as a HostState to price.

A state (the switches of hardware_profiles/readings/<profile>.yaml `states`, also the rungs of
`hicache ablate`) says which of the seed's fixes are on. The cache side (layout, hit counting,
ghost list, TP-shared capacity) is replayed; the host side (submission thread, page size, NUMA,
IDO, registered bytes) is priced (hicache_ref.sim.price.mechanisms). A replay depends only on the cache
side, so each is run once and priced under any parameters.
"""

from __future__ import annotations

from hal.transfer.layout_registry import get_layout
from hardware_profiles.measured_readings import SWITCHES
from hicache_ref.sim.price.mechanisms import PAGE_4K, PAGE_THP, HostState, Unpriced
from hicache_ref.sim.run.baseline import off_spec
from hicache_ref.sim.run.replay_workers import replay_in_workers, worker_count
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.run.served_replay import replay_served
from hicache_ref.spec import CacheSpec

FIRST_BUILD = {k: v[0] for k, v in SWITCHES.items()}  # every switch as first built (HiCache on)


def state(**switches) -> dict:
    """The first build with `switches` changed (names and values as SWITCHES)."""
    for k, v in switches.items():
        if k not in SWITCHES or v not in SWITCHES[k]:
            raise ValueError(f"{k}: not a state switch ({', '.join(SWITCHES)}) or not one of its values")
    return {**FIRST_BUILD, "hicache": True, **switches}


def tokens_in(gb: float, token_bytes: int, page_size: int) -> int:
    """Whole pages of KV in `gb` decimal GB."""
    return int(gb * 1e9) // token_bytes // page_size * page_size


def cache_key(st: dict, l2_per_card: int) -> tuple:
    """What a replay of `st` depends on (its host-side switches are priced, not replayed)."""
    if not st["hicache"]:
        return ("off",)
    key = (st["host_layout"], st["hit_count"], st["ghost"], st["tp_shared"], int(l2_per_card))
    return key + (("l3", st["l3"]),) if st.get("l3") else key  # the ablate rung's model L3 (hicache_ref.sim.ladder.ablate)


def cache_spec(st: dict, base: CacheSpec, l2_per_card: int, tp: int) -> CacheSpec:
    """The spec one rank replays in `st`: `base` (L1, geometry, serving, profile) with L2 of
    `l2_per_card` tokens (the TP group's whole pool when shared); HiCache off is baseline.off_spec's."""
    if not st["hicache"]:
        return off_spec(base)
    l2 = l2_per_card * (tp if st["tp_shared"] else 1)
    layout = st["host_layout"]
    return base.replace(l2_tokens=l2, host_layout=layout, io_backend=get_layout(layout).native_io_backend,
                        write_policy="write_through_selective", hit_count=st["hit_count"], ghost=st["ghost"],
                        tp=None, shared_host=False, **l3_of(st))


def l3_of(st: dict) -> dict:
    """The model L3 a state pools from decode nodes (`l3`: its tokens, or "unlimited"), as spec fields."""
    if not st.get("l3") or not st["hicache"]:
        return {}
    return dict(l3="model:", l3_tokens=None if st["l3"] == "unlimited" else int(st["l3"]))


def host_state(st: dict, profile, l2_per_card: int, token_bytes: int, tp: int) -> HostState:
    """The host side of `st`: each card registers its own pool, or the whole shared one; with
    private pools every card behind an uplink writes at once, with a shared one only rank 0."""
    per_switch = (profile.topology.devices_per_switch if profile.topology else None) or 1
    registered = l2_per_card * token_bytes * (tp if st["tp_shared"] else 1) if st["hicache"] else 0
    return HostState(submission=st["submission"], host_page_bytes=PAGE_THP if st["host_pages"] == "thp" else PAGE_4K,
                     numa=st["numa"], ido=st["ido"], writers_per_uplink=1 if st["tp_shared"] else min(per_switch, tp),
                     registered_bytes=registered, numa_nodes=profile.host.numa_nodes or 1)


class NotRunOnEngine(Unpriced):
    """The chosen engine does not run a state's cache side (the message names the switch): every
    figure of that state is not measured, as an unpriced one is, never another engine's."""


class Runs:
    """Replays of states over one trace from one base spec, each run once (figures by cache_key);
    served when the base spec has a concurrency. `engine` (a hicache_ref.engines.LadderEngine, None for
    the reference) replays the HiCache-on states; HiCache off (no L2) stays the reference's, as in
    `hicache sweep`."""

    def __init__(self, base: CacheSpec, requests, tp: int, progress=None, engine=None):
        self.base, self.requests, self.tp, self.engine = base, list(requests), tp, engine
        self._figs: dict[tuple, dict] = {}
        self.progress = progress

    def _for_engine(self, st: dict) -> dict:
        """`st` as an engine replays it: the ladder's default hit counting is the engine's own decision
        (the base's switches, no override to refuse); a rung that changes the counting keeps its
        switches, for the engine to run or refuse naming the option."""
        if self.engine is None or (st["hit_count"], st["ghost"]) != (FIRST_BUILD["hit_count"], FIRST_BUILD["ghost"]):
            return st
        return dict(st, hit_count=self.base.semantics.hit_count, ghost=self.base.tiers.ghost)

    def prefetch(self, pairs, workers: int | None = None) -> None:
        """Replay every (state, l2_per_card) of `pairs` not yet run, on up to `workers` processes
        (None: one per core; 1: here), so the `figures` calls that follow find them made. The
        reference's replays only: another engine's run in `figures`, one at a time, when asked."""
        if self.engine is not None:
            return
        todo: dict[tuple, CacheSpec] = {}
        for st, l2 in pairs:
            key = cache_key(st, l2)
            if key not in self._figs and key not in todo:
                todo[key] = cache_spec(st, self.base, l2, self.tp)
        workers = worker_count(workers, len(todo))
        if workers == 1:  # here, in order: each exactly as `figures` would make it
            for st, l2 in pairs:
                self.figures(st, l2)
            return
        before = len(self._figs)
        done = [0]

        def tick() -> None:
            done[0] += 1
            if self.progress is not None:
                self.progress(before + done[0])

        served = self.base.serving.concurrency is not None
        self._figs.update(zip(todo, replay_in_workers(list(todo.values()), self.requests, workers, tick, served),
                              strict=True))

    def figures(self, st: dict, l2_per_card: int) -> dict:
        """The replay of `st`; NotRunOnEngine when the engine cannot run here or does not run `st`
        (before any work)."""
        key = cache_key(st, l2_per_card)
        if key not in self._figs:
            spec = cache_spec(self._for_engine(st), self.base, l2_per_card, self.tp)
            if self.engine is not None and st["hicache"]:
                why = self.engine.not_run(spec)
                if why is not None:
                    raise NotRunOnEngine(why)
                self._figs[key] = self.engine.replay(spec, self.requests)
            else:
                run = replay_served if spec.serving.concurrency is not None else replay
                self._figs[key] = run(spec, self.requests, off=False)  # priced by the caller against "off"
            if self.progress is not None:
                self.progress(len(self._figs))
        return self._figs[key]
