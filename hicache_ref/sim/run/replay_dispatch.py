"""`hicache replay` as one library call: the spec's serving and tp nodes choose serial, served or TP.

The capacities are checked against this machine's memory before anything is built
(hicache_ref.spec.capacity_check), and the figures carry the resolved spec under "spec".
"""

from __future__ import annotations

from hicache_ref.sim.run.baseline import off_spec
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.run.served_replay import replay_served
from hicache_ref.sim.run.tp_replay import tp_replay
from hicache_ref.sim.trace.reader import read_trace
from hicache_ref.spec import CacheSpec
from hicache_ref.spec.capacity_check import check_capacity


def run_replay(spec: CacheSpec, trace, limit: int | None = None, off: bool | None = None) -> dict:
    """Replay the first `limit` requests of `trace` as `spec` says: TP group (spec.tp.ranks), served
    (spec.serving.concurrency) or serial, a TP group served or serial; the figures, with "host_sizing"
    where L2 was sized upstream-style.
    Priced against HiCache off (hicache_ref.sim.run.baseline), replayed here; `off` False: not priced."""
    check_capacity(spec)
    if isinstance(trace, (list, tuple)):
        trace, limit = list(trace)[:limit], None
    elif spec.serving.concurrency is not None:  # arrival times mean something in time order only: a line going back is refused
        trace, limit = read_trace(trace, limit, ordered=spec.serving.timestamps), None
    if spec.tp.ranks is not None:
        fig = tp_replay(spec, trace, limit, off=off)
    elif spec.serving.concurrency is None:
        fig = replay(spec, trace, limit, off=off)
    else:
        fig = replay_served(spec, trace, off=off)
    if spec.host_sizing is not None:
        fig["host_sizing"] = spec.host_sizing
    return fig


def off_replay(spec: CacheSpec, requests: list) -> dict:
    """HiCache off for `spec` (hicache_ref.sim.run.baseline) replayed by the reference over `requests`:
    served when the spec has a concurrency, serial otherwise; what another engine's run is priced against."""
    off = off_spec(spec)
    if off.serving.concurrency is None:
        return replay(off, list(requests), off=False)
    return replay_served(off, list(requests), off=False)
