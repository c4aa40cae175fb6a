"""One prefill through SGLang's cache, as its scheduler drives it: match, load back, allocate
(evicting through upstream's allocator), insert, unlock; a served replay's prefill also keeps its
cached path locked (prefill_locked) until release, and a step's loads and backups are submitted
once, at the batch's end (end_batch).

Timing is pinned: every HAL copy is complete when its op returns (kernel_shim); the
backups a request queued are submitted at its end (flush_pending_backups) and every ack is
taken right after (check_hicache_events, upstream's per-step poll, which the next request's
start would run with nothing new in between), so acks land at the step the reference
engine applies its completions at. Under PD disaggregation the prefill inserts the
request twice (unfinished, then finished), as the reference's --pd-disagg models it.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

import numpy as np
import torch


class UpstreamResult(NamedTuple):
    input_tokens: int
    l1_hit_tokens: int
    l2_hit_tokens: int
    l2_unloaded_tokens: int
    truncated: bool
    l3_hit_tokens: int = 0
    evicted_tokens: int = 0  # L1 tokens this request's evictions freed (upstream's own count)
    host_evicted_tokens: int = 0  # L2 tokens freed, likewise
    kv_mismatch_tokens: int = 0  # hit tokens whose loaded KV is not what compute wrote (with kv)


class RequestDriver:
    """Runs requests on an UpstreamCache (hicache_ref.engines.sglang.build_cache)."""

    def __init__(self, upstream, pd_disagg: bool, l3: bool = False, kv: bool = False):
        """`l3`: upstream's cache has a store (its L3 steps run); `kv`: write synthetic KV into the
        device pool and check every serial request's hit against it (materialized replays)."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        from hicache_ref.engines.sglang.kv import UpstreamKV
        from hicache_ref.engines.sglang.prefetch import StoragePrefetch
        from hicache_ref.engines.sglang.tally import EvictionTally

        self.up, self.pd = upstream, pd_disagg
        self.evictions = EvictionTally(upstream.cache)
        self.ps = upstream.kv_pool.page_size
        self._req = lambda rid: Req(rid=str(rid), origin_input_text="", origin_input_ids=array("q"),
                                    sampling_params=SamplingParams(temperature=0, max_new_tokens=1))
        self._rid = 0
        # upstream's L3 steps, when its cache has a store (hicache_ref.engines.sglang.prefetch)
        self.l3 = StoragePrefetch(upstream.cache, self.ps) if l3 else None
        self.kv = UpstreamKV(upstream.kv_pool) if kv else None
        self._unchecked: list = []  # a served step's hits (tokens, slots), checked once its loads land

    def settle(self) -> None:
        """A scheduler step's start: upstream's own per-step poll (check_hicache_events) takes
        every ack (all copies are complete by then: see the module docstring)."""
        self.up.cache.check_hicache_events()
        if self.l3 is not None:
            self.l3.settle()

    def request(self, tokens) -> UpstreamResult:
        """One prefill of `tokens` (a sequence of token ids), a batch of its own (serial replay)."""
        self.settle()
        res, _ = self._prefill(np.asarray(tokens, dtype=np.int64), submit_loads=True)
        self.end_batch()
        self.settle()  # what the next step's start would do, here, so a request's transfers count in its row
        return res

    def prefill_locked(self, tokens):
        """One of a scheduling step's prefills (served replay): (its UpstreamResult, the lock on its
        cached path, for `release`). Its load waits for the step's merged submission (end_batch)."""
        ids = np.asarray(tokens, dtype=np.int64)
        res, cached_len = self._prefill(ids, submit_loads=False)
        if cached_len == 0:
            return res, None  # nothing cached: nothing to hold (upstream's unlock takes None)
        # The cached path, matched again and locked as the scheduler holds a running request's
        # prefix (the same re-match the reference's served replay does).
        m = self.up.cache.match_prefix(self._match_params(ids[:cached_len]))
        return res, self.up.cache.lock(m.last_device_node)

    def end_batch(self) -> int:
        """A batch's end: its loads submitted as one merged job (upstream's ready_to_load_host_cache,
        once per batch), then its queued backups as one (flush_pending_backups, after the forward).
        With kv: the hit tokens of the step's prefills whose KV is not what compute wrote, checked
        once the loads landed (each prefix stayed locked since its prefill); else 0."""
        self.up.cache.ready_to_load_host_cache()
        self.up.cache.flush_pending_backups()
        unchecked, self._unchecked = self._unchecked, []
        return sum(self.kv.mismatches(tokens, slots) for tokens, slots in unchecked)

    def release(self, lock) -> None:
        """The request no longer holds its prefix (finished, or handed off under PD)."""
        self.up.cache.unlock(lock)

    def _match_params(self, ids: np.ndarray):
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        return MatchPrefixParams(key=RadixKey(array("q", ids.tobytes())))

    def _prefill(self, ids: np.ndarray, submit_loads: bool) -> tuple[UpstreamResult, int]:
        """Match, load back, evict, allocate, insert, unlock: (the result, tokens now cached)."""
        from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams, InsertParams
        from sglang.srt.mem_cache.common import evict_from_tree_cache
        from sglang.srt.mem_cache.radix_cache import RadixKey

        cache, alloc, ps = self.up.cache, self.up.allocator, self.ps
        ev0 = self.evictions.device_tokens, self.evictions.host_tokens
        n = len(ids)
        full = n // ps * ps
        m = cache.match_prefix(self._match_params(ids[:full]))
        from_l3 = 0  # tokens upstream read from L3 into L2 for this request
        if self.l3 is not None:
            self._rid += 1
            from_l3 = self.l3.fetch(f"l3-{self._rid}", ids[:full], m)
            if from_l3:  # the scheduler's admission matches again (init_next_round_input)
                m = cache.match_prefix(self._match_params(ids[:full]))
        l1, node = m.device_prefix_len, m.last_device_node
        l2 = unloaded = 0
        if m.host_hit_length > 0:
            self._rid += 1
            req = self._req(self._rid)
            req.last_node, req.prefix_len, req.host_hit_length = node, l1, m.host_hit_length
            req.best_match_node, req.last_host_node = m.best_match_node, m.last_host_node
            loaded, node = cache.init_load_back(InitLoadBackParams(
                best_match_node=m.best_match_node, host_hit_length=m.host_hit_length, req=req))
            l2 = loaded
            unloaded = m.host_hit_length - loaded
            if loaded and submit_loads:
                cache.ready_to_load_host_cache()
        lock = cache.lock(node)
        cached_len = mismatch = 0
        try:
            prefix = l1 + l2
            need = -(-(n - prefix) // ps) * ps
            new = None
            if need > 0:
                evict_from_tree_cache(cache, self._demand(prefix, n))
                # A prompt longer than what is free is cut to what fits (as the reference does).
                take = min(need, alloc.available_size() // ps * ps)
                new = alloc.alloc(take) if take else None
            else:
                take = 0
            truncated = take < need
            cached_len = min(full, prefix + take)
            dev = self._path_indices(node, prefix) if cached_len > 0 or self.kv is not None else None
            if self.kv is not None:
                if submit_loads:
                    mismatch = self.kv.mismatches(ids[:prefix], dev)
                elif prefix:  # a served step's loads land at its end: checked there (end_batch)
                    self._unchecked.append((ids[:prefix], dev))
                if new is not None:
                    self.kv.write(ids[prefix:], prefix, new.numpy())
            if cached_len > 0:
                kept = cached_len - prefix
                value = np.concatenate([dev, new[:kept].numpy()]) if kept else dev
                key = RadixKey(array("q", ids[:cached_len].tobytes()))
                vt = torch.as_tensor(value, dtype=torch.int64)
                # prev_prefix_len: slots below it are the tree's already (the insert frees the
                # request's duplicates only past it); inserted_len: what this request inserted before.
                cache.insert(InsertParams(key=key, value=vt, prev_prefix_len=prefix))
                if self.pd:
                    cache.insert(InsertParams(key=key, value=vt, prev_prefix_len=cached_len, inserted_len=cached_len))
                if new is not None and take > kept:
                    alloc.free(new[kept:])
            elif new is not None:
                alloc.free(new)
        finally:
            cache.unlock(lock)
        ev = self.evictions
        l3 = min(from_l3, l2)  # loaded to L1 with the rest of the host hit (as the reference counts)
        return UpstreamResult(n, l1, l2 - l3, unloaded, truncated, l3, evicted_tokens=ev.device_tokens - ev0[0],
                              host_evicted_tokens=ev.host_tokens - ev0[1], kv_mismatch_tokens=mismatch), cached_len

    def _demand(self, prefix: int, n: int) -> int:
        """Tokens upstream's allocation evicts for: the extend (page 1), else the extend plus a
        page per request as its allocator reports it (alloc_token_slots, alloc_paged_token_slots_extend)."""
        if self.ps == 1:
            return n - prefix
        return self.up.allocator.get_extend_allocation_demand(
            torch.tensor([prefix]), torch.tensor([n]), conservative_num_tokens=n - prefix + self.ps, shard_size=1)

    def _path_indices(self, node, prefix: int) -> np.ndarray:
        """The device slots of the matched (and loaded) prefix ending at `node`."""
        idx = self.up.cache.path_device_indices(node)
        out = np.asarray(idx.cpu().numpy() if hasattr(idx, "cpu") else idx, dtype=np.int64)
        if len(out) != prefix:
            raise RuntimeError(f"sglang engine: the matched path holds {len(out)} slots, the match said {prefix}")
        return out
