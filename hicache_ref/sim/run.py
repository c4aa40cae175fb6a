"""`hicache replay` as one library call: the spec's serving and tp nodes choose serial, served or TP.

The capacities are checked against this machine's memory before anything is built
(hicache_ref.spec.memory), and the figures carry the resolved spec under "spec".
"""

from __future__ import annotations

from hicache_ref.sim.replay import replay
from hicache_ref.sim.replay_tp import tp_replay
from hicache_ref.sim.serving import replay_served
from hicache_ref.sim.trace import read_trace
from hicache_ref.spec import CacheSpec, SpecError
from hicache_ref.spec.memory import check_capacity


def run_replay(spec: CacheSpec, trace, limit: int | None = None) -> dict:
    """Replay the first `limit` requests of `trace` as `spec` says: TP group (spec.tp.ranks), served
    (spec.serving.concurrency) or serial; the figures, with "host_sizing" where L2 was sized upstream-style."""
    if spec.tp.ranks is not None and spec.serving.concurrency is not None:
        raise SpecError("--tp", "tp.ranks", "applies to a serial replay (one rank stands for the group); "
                        "drop --concurrency")
    check_capacity(spec)
    if spec.tp.ranks is not None:
        fig = tp_replay(spec, trace, limit)
    elif spec.serving.concurrency is None:
        fig = replay(spec, trace, limit)
    else:  # arrival times only mean something in time order: timestamps refuse a line going back
        fig = replay_served(spec, read_trace(trace, limit, ordered=spec.serving.timestamps))
    if spec.host_sizing is not None:
        fig["host_sizing"] = spec.host_sizing
    return fig
