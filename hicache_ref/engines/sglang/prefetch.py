"""Upstream's L3 steps around one admission, driven with pinned timing, and their figures.

`StoragePrefetch` runs what the scheduler runs around an admission (`_prefetch_kvcache`, then
`check_prefetch_progress` / `pop_prefetch_loaded_span`), with every storage thread's work finished
before the next decision: a prefetch is polled until upstream reports it complete
(wait_complete, the only policy whose outcome does not depend on thread timing), and every
storage write is acknowledged before the next request looks up L3 (the reference's rule).
The store itself (which one, its lifetime, what it wrote): hicache_ref.engines.sglang.l3_objects.
"""

from __future__ import annotations

import time
from array import array

from hicache_ref.storage.registry import split_spec

POLL_SECONDS = 0.0002
DEADLINE_SECONDS = 60.0  # a storage thread that takes longer than this is a failure, not a wait


def _waited(done, what: str) -> None:
    end = time.monotonic() + DEADLINE_SECONDS
    while not done():
        if time.monotonic() > end:
            raise RuntimeError(f"sglang engine: upstream's {what} did not finish within {DEADLINE_SECONDS:g} s")
        time.sleep(POLL_SECONDS)


class StoragePrefetch:
    """Upstream's L3 steps for one cache (hicache_ref.engines.sglang.build_cache.UpstreamCache)."""

    def __init__(self, cache, page_size: int):
        self.cache, self.ps = cache, page_size
        self.reads: list[int] = []  # pages upstream read from the store into L2, per prefetch
        self.lookups = 0  # prefetches upstream issued (past its threshold and rate limit): L3 lookups

    def fetch(self, rid: str, ids, match) -> int:
        """The scheduler's prefetch of request `ids` (its whole pages) after `match`, waited for:
        the tokens upstream loaded from L3 into L2 for it (pop_prefetch_loaded_span)."""
        from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle

        cache = self.cache
        anchor = match.last_host_node
        if not (cache.is_backuped(anchor) or cache.is_root(anchor)):
            return 0  # an unbacked anchor: upstream asks nothing (its write-through prefix is contiguous)
        matched = match.device_prefix_len + match.host_hit_length
        handle = CacheRequestHandle(rid=rid, attempt_id=0)
        cache.prefetch_from_storage(handle, anchor, array("q", ids[matched:].tobytes()),
                                    cache.get_last_hash_value(anchor), None,
                                    matched_prefix_tokens=array("q", ids[:matched].tobytes()))
        ongoing = cache.ongoing_prefetch.get(handle)
        if ongoing is None:
            return 0  # declined (below the threshold, rate limited)

        def complete() -> bool:
            cache.check_hicache_events()  # the scheduler's per-step poll drains the storage queues
            return cache.check_prefetch_progress(handle)

        _waited(complete, "prefetch")
        self.lookups += 1
        if ongoing.operation.completed_tokens:
            self.reads.append(ongoing.operation.completed_tokens // self.ps)
        loaded, _ = cache.pop_prefetch_loaded_span(handle)
        cache.finish_storage_prefetch_admission(handle, loaded, None)
        return loaded

    def settle(self) -> None:
        """Every storage write queued so far acknowledged (and its host lock released)."""
        cache = self.cache

        def written() -> bool:
            cache.check_hicache_events()
            return not cache.ongoing_backup

        _waited(written, "storage backup")


def l3_figures(spec, backend, prefetch: StoragePrefetch, written: int) -> dict:
    """The reference's L3 keys (hicache_ref.l3.tier.L3Tier.figures) from what upstream did: its reads
    and writes counted here, priced by the profile's L3 link as the reference prices them (a request
    waits for every page of its prefetch; writes are off the request path)."""
    from hicache_ref.l3.prefetch_policy import L3Link

    geom, st = spec.geometry, spec.storage
    page_bytes = geom.token_bytes * spec.page_size
    link = L3Link.from_profile(getattr(backend, "profile", None), page_bytes)
    read = sum(prefetch.reads)
    return dict(l3=st.l3, l3_errors=0, l3_bytes_read=read * page_bytes, l3_bytes_written=written * page_bytes,
                l3_modeled_stall_seconds=sum(link.read_seconds(p) for p in prefetch.reads),
                l3_modeled_write_seconds=link.write_seconds(written), l3_last_error=None,
                l3_prefetch_policy=st.prefetch_policy, l3_threshold_tokens=st.prefetch_threshold,
                l3_anchor_rule="backed_up",  # upstream's own rule, whatever the preset models
                l3_link=link.report(), l3_lookups=prefetch.lookups,
                l3_prefetches=len(prefetch.reads), l3_pages_read=read,
                l3_pages_written=written, l3_corrupt_pages=0, l3_unverified_pages=read,  # no trailer upstream
                l3_storage=split_spec(st.l3)[0], l3_max_bytes=None)
