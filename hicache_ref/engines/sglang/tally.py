"""What SGLang's cache did, counted from outside: transfers per direction, and evictions.

`CountingBackend` stands between SGLang's transfers and the HAL backend (every plan goes
through `execute`), so the sglang engine reports the reference engine's transfer keys from
the plans themselves, not from upstream's own counters. `EvictionTally` reads the tokens
upstream's device and host evictions report freeing, leaving every decision upstream's.
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

    def __init__(self, backend, counts_plans: bool = True):
        self.inner = backend
        self.tallies = {d: DirectionTally() for d in POOL_DIRECTIONS}
        # False: the plans run on narrow rows and pricing.FullGeometryPricer counts each copy instead
        self.counts_plans = counts_plans

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def execute(self, plan, stream=None):
        """Run `plan` on the wrapped backend, then count it under its direction."""
        event = self.inner.execute(plan, stream)
        if not self.counts_plans:
            return event
        t = self.tallies.get(str(getattr(plan.direction, "value", plan.direction)))
        if t is not None:
            t.bytes += plan.nbytes
            t.segments += plan.num_segments
            t.transfers += 1
            t.launches += plan.launches
            seconds = self.inner.model_seconds(plan)
            t.modeled_seconds += seconds or 0.0
        return event


class EvictionTally:
    """Tokens evicted from L1 (device) and L2 (host) by one SGLang cache, as its evictions return them.

    Wraps, on the cache instance only, the two entry points every eviction goes through:
    `_evict` (behind evict and evict_for_alloc; its EvictResult's num_tokens_evicted) and
    `evict_host` (the tokens it freed). Arguments and results pass through unchanged.
    """

    def __init__(self, cache):
        self.device_tokens = self.host_tokens = 0
        evict, evict_host = cache._evict, cache.evict_host

        def counted_evict(*args, **kwargs):
            result = evict(*args, **kwargs)
            self.device_tokens += result.num_tokens_evicted
            return result

        def counted_evict_host(*args, **kwargs):
            freed = evict_host(*args, **kwargs)
            self.host_tokens += freed
            return freed

        cache._evict, cache.evict_host = counted_evict, counted_evict_host
