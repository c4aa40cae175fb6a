"""What SGLang's pools moved through the HAL: per direction bytes, segments, launches, modeled seconds.

`CountingBackend` stands between SGLang's transfers and the HAL backend (every plan goes
through `execute`), so the sglang engine reports the reference engine's transfer keys from
the plans themselves, not from upstream's own counters.
"""

from __future__ import annotations

from hal.transfer.direction import POOL_DIRECTIONS


class DirectionTally:
    """One direction's totals (the reference's controller stats, same names)."""

    def __init__(self):
        self.bytes = self.segments = self.transfers = self.launches = 0
        self.modeled_seconds = 0.0


class CountingBackend:
    """`backend` with every executed plan counted per direction (attribute access passes through)."""

    def __init__(self, backend):
        self.inner = backend
        self.tallies = {d: DirectionTally() for d in POOL_DIRECTIONS}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def execute(self, plan, stream=None):
        """Run `plan` on the wrapped backend, then count it under its direction."""
        event = self.inner.execute(plan, stream)
        t = self.tallies.get(str(getattr(plan.direction, "value", plan.direction)))
        if t is not None:
            t.bytes += plan.nbytes
            t.segments += plan.num_segments
            t.transfers += 1
            t.launches += plan.launches
            seconds = self.inner.model_seconds(plan)
            t.modeled_seconds += seconds or 0.0
        return event
