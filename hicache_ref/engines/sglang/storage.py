"""L3 on the sglang engine: upstream's own storage backend and prefetch, driven with pinned timing.

`server_fields` turns the spec's storage node into the server arguments that make upstream's
`init_hicache` attach its own store (file:DIR is HiCacheFile in DIR; its keys and bytes are the
ones `--l3-keys sglang` reads and writes, so either engine serves the other's store).
`StoragePrefetch` runs what the scheduler runs around an admission (`_prefetch_kvcache`, then
`check_prefetch_progress` / `pop_prefetch_loaded_span`), with every storage thread's work finished
before the next decision: a prefetch is polled until upstream reports it complete
(wait_complete, the only policy whose outcome does not depend on thread timing), and every
storage write is acknowledged before the next request looks up L3 (the reference's rule).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from array import array

from hicache_ref.storage.objects import DEFAULT_OBJECT_ORDER
from hicache_ref.storage.registry import split_spec

STORES = {"file": "file"}  # the harness's store name -> upstream's hicache_storage_backend
POLL_SECONDS = 0.0002
DEADLINE_SECONDS = 60.0  # a storage thread that takes longer than this is a failure, not a wait


def refuse_unsupported(storage, overrides=()) -> None:
    """ValueError naming the option the engine cannot run with an L3 (before anything is built);
    `overrides`: the semantics switches given against the preset (a preset's own value of a switch
    upstream has no setting for is the reference's model, not a request to upstream)."""
    name, args = split_spec(storage.l3)
    if name not in STORES:
        raise ValueError(f"--l3: the sglang engine runs upstream's own stores: file:DIR (HiCacheFile); "
                         f"{name}: is the reference engine's")
    if "," in args or not args.strip():
        raise ValueError("--l3: the sglang engine takes file:DIR only (HiCacheFile has no max_bytes or digest)")
    if storage.key_scheme != "sglang":
        raise ValueError("--l3-keys: upstream's store holds upstream's objects: give --l3-keys sglang")
    for option, value in (("--l3-tag", storage.l3_tag),
                          ("--l3-trailer", storage.trailer if storage.trailer == "on" else None),
                          ("--l3-extra-key", storage.extra_key), ("--l3-cache-salt", storage.cache_salt),
                          ("--prefetch-limit", storage.prefetch_limit_tokens)):
        if value is not None:
            raise ValueError(f"{option}: not a setting of the sglang engine's L3 (upstream's HiCacheFile, "
                             "requests without a namespace)")
    if storage.prefetch_policy != "wait_complete":
        raise ValueError("--prefetch-policy: the sglang engine pins upstream's timing (every prefetch completes "
                         "before admission): give --prefetch-policy wait_complete")
    if storage.prefetch_anchor != "backed_up" and "prefetch_anchor" in overrides:
        raise ValueError("--prefetch-anchor: upstream's scheduler prefetches past a backed-up prefix only "
                         "(give --prefetch-anchor backed_up, or leave it out)")
    if storage.prefetch_slack_seconds:
        raise ValueError("--prefetch-slack-ms: the sglang engine models no queue time (give 0)")


def with_upstream_order(spec):
    """`spec` with its L3 objects in the byte order upstream writes them in: its host layout's
    (the default object order names the default server's; another one given is refused)."""
    st, layout = spec.storage, spec.effective_host_layout
    if st.object_layout == layout:
        return spec
    if st.object_layout != DEFAULT_OBJECT_ORDER:
        raise ValueError(f"--l3-object-layout: upstream writes pages in its host layout's order ({layout}); "
                         f"give --l3-object-layout {layout} or leave it out")
    return dataclasses.replace(spec, storage=dataclasses.replace(st, object_layout=layout))


# Upstream's storage config reads the process's place in its parallel groups, which a server
# publishes at launch; the engine is one rank of one (serial replay; --tp replays one rank).
ONE_RANK = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_tp_rank=0, attn_tp_size=1, attn_cp_rank=0,
                attn_cp_size=1, attn_dcp_rank=0, attn_dcp_size=1, attn_dp_rank=0, attn_dp_size=1, dp_rank=0, dp_size=1)


def stamp_one_rank() -> None:
    """Publish one rank's parallel place for upstream's storage (undone by `clear_rank`)."""
    from sglang.srt.runtime_context import get_parallel

    get_parallel().override_permanently(**ONE_RANK)


def clear_rank() -> None:
    from sglang.srt.runtime_context import get_parallel

    get_parallel().clear_stamp()


def server_fields(storage) -> dict:
    """ServerArgs fields for upstream's store of `storage` (a StorageSpec with an L3), or {} without."""
    if storage.l3 is None:
        return {}
    name, args = split_spec(storage.l3)
    extra = {"prefetch_threshold": storage.prefetch_threshold}
    return dict(hicache_storage_backend=STORES[name], file_storage_path=os.path.abspath(args.strip()),
                hicache_storage_backend_extra_config=json.dumps(extra),
                served_model_name=storage.l3_model or "")


def _waited(done, what: str) -> None:
    end = time.monotonic() + DEADLINE_SECONDS
    while not done():
        if time.monotonic() > end:
            raise RuntimeError(f"sglang engine: upstream's {what} did not finish within {DEADLINE_SECONDS:g} s")
        time.sleep(POLL_SECONDS)


class StoragePrefetch:
    """Upstream's L3 steps for one cache (hicache_ref.engines.sglang.build.UpstreamCache)."""

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


def stored_objects(storage) -> int:
    """Objects in the store of `storage` (a StorageSpec): files in HiCacheFile's directory (0 without
    an L3, or before upstream made the directory). Their difference over a run is what it wrote:
    upstream skips a page whose object exists."""
    if storage.l3 is None:
        return 0
    path = split_spec(storage.l3)[1].strip()
    try:
        with os.scandir(path) as entries:
            return sum(1 for e in entries if e.name.endswith(".bin") and e.is_file(follow_symlinks=False))
    except FileNotFoundError:
        return 0


def l3_figures(spec, backend, prefetch: StoragePrefetch, written: int) -> dict:
    """The reference's L3 keys (hicache_ref.l3.tier.L3Tier.figures) from what upstream did: its reads
    and writes counted here, priced by the profile's L3 link as the reference prices them (a request
    waits for every page of its prefetch; writes are off the request path)."""
    from hicache_ref.l3.policy import L3Link

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
