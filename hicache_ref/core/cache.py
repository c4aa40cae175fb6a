"""HiCache: the request path of the reference cache, wiring tree + pools + controller.

One `request(tokens)` does what a scheduler does for a prefill, serially.
It completes landed transfers, matches, loads back, allocates, writes KV and inserts.
The steps are the tour in hicache_ref/README.md; the edge cases are in its "Design notes".
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hicache_ref.core.allocator import pages_to_slots
from hicache_ref.core.block_tokens import TraceTokens
from hicache_ref.core.controller import CacheController
from hicache_ref.core.ghost import GhostList
from hicache_ref.core.pools import DevicePool, HostPool
from hicache_ref.core.prefill import Prefill
from hicache_ref.core.radix import RadixTree, TierCopy
from hicache_ref.core.synthetic_kv import KVWriter


class RequestResult(NamedTuple):
    input_tokens: int
    l1_hit_tokens: int
    l2_hit_tokens: int  # host-cached prefix tokens loaded back for this request
    l2_unloaded_tokens: int  # host-cached prefix tokens recomputed: no L1 room to load them
    cached_tokens: int  # page-aligned tokens the tree holds for this request afterwards
    truncated: bool  # the live request did not fit in L1
    kv_mismatch_tokens: int  # hit tokens whose KV bytes were wrong (materialized only)
    l3_hit_tokens: int = 0  # prefix tokens read from L3 (hicache_ref.l3) and loaded; not in l2_hit_tokens


class HiCache:
    """L1 of `l1_tokens` and L2 of `l2_tokens` (0: no L2) as a spec describes, on `backend`.

    The KV is real (`materialize`: written, copied and checked) exactly when the backend
    moves bytes; on one that does not (count) the pools are meta tensors and transfers are
    priced on the modeled clock only.
    """

    def __init__(self, spec, backend, l1_tokens: int, l2_tokens: int, page_keys: str = "tokens",
                 inline: bool = False):
        """The cache `spec` (a hicache_ref.spec.CacheSpec, checked and resolved) describes, with
        capacities already resolved (CacheSpec.capacities), on `backend`. `inline`: transfers and
        KV writes run on the calling thread (CacheController's `inline`; needs backend.runs_inline)."""
        g, t, sem = spec.geometry, spec.tiers, spec.semantics
        geom = g.kv()
        self.geom, self.page_size = geom, geom.page_size
        self.pd_disagg = spec.serving.pd_disagg
        self.load_back_threshold, self.load_back_quota = sem.load_back_threshold or 0, sem.load_back_quota
        self.backend, self.sync = backend, spec.sync
        self.materialize = backend.capabilities().moves_bytes
        self.device = DevicePool(geom, l1_tokens, backend=backend, materialize=True, order=t.free_list)
        self.host = HostPool(geom, l2_tokens, t.host_layout, backend=backend, materialize=True,
                             order=t.host_free_list, io_backend=t.io_backend) if l2_tokens else None
        ghost = GhostList(spec.ghost_bound(l1_tokens)) if t.ghost else None
        self.tree = RadixTree(spec, device=self.device, host=self.host, ghost=ghost,
                              on_write_back=self._on_write_back, page_keys=page_keys)
        self.controller = CacheController(self.device, self.host, backend, inline) if self.host is not None else None
        self.kv = KVWriter(self.device, backend, inline) if self.materialize else None
        self.l3 = None  # an hicache_ref.l3.L3Tier, attached by hicache_ref.l3.attach_l3
        self._closed = False

    # -- completions ----------------------------------------------------------------------
    def _complete(self, acks) -> None:
        for ack in acks:
            t = ack.tag
            if isinstance(t, TierCopy) and t.lock_node is not None and not t.done:
                self.tree.tiers.complete(t)
                if self.l3 is not None and t.kind == "backup":
                    self.l3.backed_up(t)  # its L2 copy is written to L3 on the L3 write thread

    def _on_write_back(self, copies: list[TierCopy]) -> None:
        # One write per copy (the tree guarantees write-backs of one evict() own disjoint
        # host slots), submitted in the tree's order on the FIFO D2H stream.
        handles = [self.controller.write_pages(t.device_pages, t.host_pages, tag=("write_back", t.num_tokens),
                                               owned=True)
                   for t in copies]
        if self.materialize:  # the tree frees these device slots when we return
            for h in handles:
                h.wait()
        if self.l3 is not None:  # landed in L2 (L3 needs materialized pools): copied out for L3
            self.l3.written_back(copies)

    def _back_up(self, backups) -> None:
        for b in backups:
            self.controller.write_pages(b.device_pages, b.host_pages, tag=b, owned=True)

    def settle(self) -> None:
        """Wait for every queued transfer and apply its completion to the tree."""
        if self.controller is not None:
            self._complete(self.controller.flush())

    # -- the request path -------------------------------------------------------------------
    def request(self, tokens, request_id=None, in_step: bool = False) -> RequestResult:
        """One prefill (module docstring). `in_step`: one of a scheduling step's prefills
        (hicache_ref.sim.run.served_replay): the step applies completions once at its start and
        checks materialized hit KV at its end, so neither happens here and this request's
        load can be held for the step's merged submission (kv_mismatch_tokens is 0 here)."""
        if self._closed:
            raise RuntimeError("HiCache: closed")
        if not isinstance(tokens, TraceTokens):  # those stay hash ids unless bytes are touched
            tokens = np.asarray(tokens)
        ps, n = self.page_size, len(tokens)
        if self.l3 is not None:  # before this request's backups are handed to it (see hicache_ref.l3.tier)
            self.l3.settle(wait=self.sync)
        if self.controller is not None and not in_step:
            self._complete(self.controller.flush() if self.sync else self.controller.poll())
        tree = self.tree
        # Pages throughout (the tree's and the controller's page-level calls): token slots
        # are made only where bytes are touched here (materialized KV).
        m = tree.match_pages(tokens)
        l3 = 0  # pages L3 added to the match, as host-resident nodes
        if self.l3 is not None:
            m, l3 = self.l3.prefetch(tokens, m)
        tree.lock(m.last_device_node)  # our L1 prefix must survive the evictions below
        fill, load = Prefill(tree, m, n), None

        def submit_load(copy) -> None:
            nonlocal load
            load = self.controller.load_pages(copy.host_pages, copy.device_pages, tag=copy, owned=True)
            if l3:
                self.l3.hit(l3)

        try:
            fill.admit(self.load_back_threshold, self.load_back_quota, on_load=submit_load)
            l1, l2, prefix = fill.l1, fill.prefix - fill.l1, fill.prefix
            l3 = l3 * ps if l2 else 0
            new_pages = fill.new_pages
            mismatch = 0
            if self.materialize:
                if not in_step:
                    if load is not None:
                        load.wait_all()
                    hit = pages_to_slots(np.concatenate([m.device_pages, fill.loaded]), ps)
                    mismatch = self.kv.mismatches(np.asarray(tokens[:prefix]), hit)
                new = pages_to_slots(new_pages, ps)
                self.kv.write(np.asarray(tokens[prefix: prefix + len(new)]), prefix, new)
            cached = prefix
            # pd_disagg: one id ties the two inserts together (per_request counts them once).
            rid = request_id if request_id is not None or not self.pd_disagg else object()
            res = fill.insert(tokens, request_id=rid, finished=not self.pd_disagg, owned=True)
            if res is not None:
                if res.prefix_len != prefix:  # only concurrent inserts could do this; replay is serial
                    raise RuntimeError(f"tree: insert found {res.prefix_len} cached tokens, match said {prefix}")
                cached = fill.cached_len
                self._back_up(res.backups)
                if self.pd_disagg:  # the tree now owns the pages for the whole prefix: nothing is adopted
                    self._back_up(fill.insert(tokens, request_id=rid, owned=True).backups)
            fill.release()  # the live partial page (or pages beyond what was cached)
        finally:
            tree.unlock(m.last_device_node)
        return RequestResult(n, l1, l2 - l3, fill.unloaded, cached, fill.truncated, mismatch, l3)

    # -- teardown ----------------------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> None:
        """Drain the controller (completions applied to the tree), then release the pools.

        A controller thread still running at the deadline (TimeoutError, re-raised) may yet
        copy into the pools, so they are left open then: their finalizers release them once
        nothing, that thread included, refers to them.
        """
        if self._closed:
            return
        self._closed = True
        stuck = False
        try:
            if self.controller is not None:
                self._complete(self.controller.shutdown(timeout=timeout, drain=True))
            if self.l3 is not None and not self.l3.close(timeout):
                stuck = True  # an L3 thread is still in a store call that may touch the host pool
        except TimeoutError:
            stuck = True
            raise
        finally:
            if not stuck:
                self.device.close()
                if self.host is not None:
                    self.host.close()

    def __enter__(self) -> HiCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
