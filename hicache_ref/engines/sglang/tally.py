"""What SGLang's cache did, counted from outside: transfers per direction, and evictions.

`DirectionTally` holds one direction's transfer totals, filled by pricing.FullGeometryPricer from
every copy upstream makes (not from upstream's own counters), so the sglang engine reports the
reference engine's transfer keys. `EvictionTally` reads the tokens upstream's device and host
evictions report freeing, leaving every decision upstream's.
"""

from __future__ import annotations


class DirectionTally:
    """One direction's totals (the reference's controller stats, same names)."""

    def __init__(self):
        self.bytes = self.segments = self.transfers = self.launches = 0
        self.modeled_seconds = 0.0


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
