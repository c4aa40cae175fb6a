"""Hypothesis state machine over tree + real pools: ownership, conservation, locks, brute-force matches, exact KV bytes."""

import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from hal.transfer import layouts
from hicache_ref.core.ghost import GhostList
from hicache_ref.core.policy import POLICIES
from hicache_ref.core.pools import DevicePool, HostPool
from hicache_ref.core.radix import RadixTree
from hicache_ref.spec import CacheSpec

PS = 2
GEOM = CacheSpec.of(page_size=PS, attention="mha", layers=2, heads=1, kv_dim=2, dtype="fp32").geometry.kv()
DEV_TOKENS, HOST_TOKENS = 24, 32

# Prompts: prefixes of a few conversations (long shared prefixes, exact repeats, multi-page
# nodes), optionally with a random tail; tokens 0..2 make only 9 distinct pages, so paths
# share and split a lot.
CONVERSATIONS = [[0, 0, 1, 1, 2, 2, 0, 1, 2, 0], [0, 0, 1, 1, 0, 0, 2, 2, 1, 1], [2, 1, 0, 2, 1, 0, 2, 1, 0, 2]]
tokens_st = st.builds(lambda conv, cut, tail: CONVERSATIONS[conv][:cut] + tail, st.integers(0, 2), st.integers(0, 10),
                      st.lists(st.integers(0, 2), max_size=3))



def tree_spec(page_size, policy="write_through_selective", **switches):
    """The spec a bare tree reads: page size, write policy and the request-path switches."""
    return CacheSpec.of(page_size=page_size, write_policy=policy, **switches)

def kv_value(seq, i: int, part: int, layer: int) -> float:
    """What prefill writes for token i of seq: depends on the whole prefix, as real KV does (exact in fp32)."""
    return float(zlib.crc32(np.asarray(seq[: i + 1], dtype="<u4").tobytes()) & 0xFFFF) + part * 0.5 + layer * 0.25


def host_index(layout: str, buf: torch.Tensor, layer: int, idx: torch.Tensor):
    """Index tuple selecting tokens `idx` of `layer` in one host part, as (n, heads, head_dim)."""
    if layout == "layer_first":
        return (layer, idx)
    if layout == "page_first":
        return (idx, layer)
    if layout == "page_first_direct":
        return (idx // PS, layer, idx % PS)
    return (idx // PS, slice(None), idx % PS, layer)  # page_head


class TreeAndPools(RuleBasedStateMachine):
    @initialize(policy=st.sampled_from(POLICIES), ghost=st.booleans(), order=st.sampled_from(["fifo", "lifo"]),
                layout=st.sampled_from(layouts.HOST_LAYOUTS))
    def setup(self, policy, ghost, order, layout):
        self.dev_pool = DevicePool(GEOM, DEV_TOKENS, materialize=True, order=order)
        self.host_pool = HostPool(GEOM, HOST_TOKENS, layout, materialize=True, order=order)
        self.layout = layout
        self.tree = RadixTree(tree_spec(PS, policy), ghost=GhostList(8) if ghost else None, device=self.dev_pool,
                              host=self.host_pool, on_write_back=self.copy_all)
        self.ever = set()  # every page prefix ever inserted (tuples of tokens)
        self.locks = []  # (node, had device copy, had host copy)
        self.pending = []  # backups whose copy has not run yet

    # -- the in-test executor: plain torch indexing between pool tensors --------------
    def copy(self, t):
        d, h = torch.from_numpy(t.device_indices), torch.from_numpy(t.host_indices)
        for p in range(GEOM.parts):
            hb = self.host_pool.buffers[p]
            for layer in range(GEOM.layers):
                db = self.dev_pool.buffers[p][layer]
                if t.kind == "load":
                    db[d] = hb[host_index(self.layout, hb, layer, h)]
                else:
                    hb[host_index(self.layout, hb, layer, h)] = db[d]

    def copy_all(self, transfers):
        for t in transfers:
            self.copy(t)

    def read(self, tier, idx):
        i = torch.from_numpy(idx)
        out = []
        for p in range(GEOM.parts):
            for layer in range(GEOM.layers):
                if tier == "device":
                    out.append(self.dev_pool.buffers[p][layer][i])
                else:
                    hb = self.host_pool.buffers[p]
                    out.append(hb[host_index(self.layout, hb, layer, i)])
        return torch.stack(out)  # (parts*layers, n, heads, head_dim)

    def expected(self, seq, lo, hi):
        vals = [[kv_value(seq, i, p, layer) for i in range(lo, hi)] for p in range(GEOM.parts)
                for layer in range(GEOM.layers)]
        return torch.tensor(vals, dtype=torch.float32)[:, :, None, None].expand(-1, -1, GEOM.heads, GEOM.head_dim)

    # -- brute-force model of what a match must return --------------------------------
    def present(self):
        """Page prefix -> 'device' | 'host', from a plain walk over every node."""
        out, stack = {}, [(self.tree.root, ())]
        while stack:
            node, prefix = stack.pop()
            for child in node.children.values():
                toks = prefix + tuple(np.frombuffer(child.key, dtype="<u4").tolist())
                for k in range(len(prefix) + PS, len(toks) + 1, PS):
                    out[toks[:k]] = "device" if child.dev is not None else "host"
                stack.append((child, toks))
        return out

    def check_match(self, seq):
        present = self.present()
        n = len(seq) // PS * PS
        on = [present.get(tuple(seq[:k])) for k in range(PS, n + 1, PS)] + [None]
        total = on.index(None) * PS
        dev = (on.index("host") * PS) if "host" in on[: total // PS] else total
        m = self.tree.match_prefix(seq)
        assert (m.device_len, m.host_len) == (dev, total - dev), (seq, m[:2], dev, total)
        assert torch.equal(self.read("device", m.device_indices), self.expected(seq, 0, dev))
        assert torch.equal(self.read("host", m.host_indices), self.expected(seq, dev, total))
        return m

    # -- rules --------------------------------------------------------------------------
    @rule(seq=tokens_st, rid=st.sampled_from([None, "a", "b"]), finished=st.booleans(), defer=st.booleans())
    def insert(self, seq, rid, finished, defer):
        n = len(seq) // PS * PS
        alloc = self.dev_pool.allocator
        idx = alloc.alloc(n)
        if idx is None:
            self.tree.tiers.evict(n)
            idx = alloc.alloc(n)
        if idx is None:
            return  # L1 is locked full: the request would wait
        for p in range(GEOM.parts):  # prefill writes the request's KV into its fresh slots
            for layer in range(GEOM.layers):
                self.dev_pool.buffers[p][layer][torch.from_numpy(idx)] = torch.tensor(
                    [kv_value(seq, i, p, layer) for i in range(n)])[:, None, None]
        r = self.tree.insert(seq, idx, request_id=rid, finished=finished)
        alloc.free(idx[: r.prefix_len])
        for t in r.backups:
            if defer:
                self.pending.append(t)
            else:
                self.copy(t)
                self.tree.tiers.complete(t)
        self.ever.update(tuple(seq[:k]) for k in range(PS, n + 1, PS))
        m = self.check_match(seq)
        assert m.device_len == n and m.host_len == 0

    @rule(seq=tokens_st)
    def match(self, seq):
        self.check_match(seq)

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def complete_backup(self, data):
        t = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        self.copy(t)  # the device slots must still hold the request's KV: the nodes were locked
        self.tree.tiers.complete(t)

    def lru_leaf(self, is_leaf):
        """Brute force: the unlocked leaf an LRU eviction must take first, from a walk over all nodes."""
        leaves = [x for x in self.tree.iter_nodes() if is_leaf(x) and x.lock_ref == 0]
        return min(leaves, key=lambda x: (x.last_access, x.id), default=None)

    @rule(n=st.integers(0, DEV_TOKENS))
    def evict(self, n):
        before = self.tree.tiers.device_pages
        first = self.lru_leaf(lambda x: x.dev is not None and all(c.dev is None for c in x.children.values()))
        e = self.tree.tiers.evict(n)
        assert before - self.tree.tiers.device_pages == len(e.freed_device_indices) // PS
        if n and first is not None:
            assert first.dev is None, "evict did not take the least recently used leaf first"
        else:
            assert e.evicted_tokens == 0

    @rule(n=st.integers(0, HOST_TOKENS))
    def evict_host(self, n):
        first = self.lru_leaf(lambda x: x.dev is None and not x.children)
        e = self.tree.tiers.evict_host(n)
        if n and first is not None:
            assert first.parent is None, "evict_host did not take the least recently used leaf first"
        else:
            assert e.evicted_tokens == 0

    @rule(seq=tokens_st)
    def load_back(self, seq):
        m = self.tree.match_prefix(seq)
        t = self.tree.tiers.load_back(m)
        if t is None:
            return
        assert t.host_indices.tolist() == m.host_indices.tolist()
        self.copy(t)
        self.tree.tiers.complete(t)
        after = self.check_match(seq)
        assert (after.device_len, after.host_len) == (m.device_len + m.host_len, 0)

    @rule(seq=tokens_st)
    def lock(self, seq):
        node = self.tree.match_prefix(seq).last_host_node
        if node is not self.tree.root:
            self.tree.lock(node)
            self.locks.append((node, node.dev is not None, node.host is not None))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        node, _, _ = self.locks.pop(data.draw(st.integers(0, len(self.locks) - 1)))
        self.tree.unlock(node)

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def slots_owned_once_and_conserved(self):
        nodes = list(self.tree.iter_nodes())
        for tier, alloc, held in (("dev", self.dev_pool.allocator, self.tree.tiers.device_pages),
                                  ("host", self.host_pool.allocator, self.tree.tiers.host_pages)):
            pages = [getattr(x, tier) for x in nodes if getattr(x, tier) is not None]
            pages = np.concatenate(pages) if pages else np.zeros(0, dtype=np.int64)
            assert len(np.unique(pages)) == len(pages), f"{tier} page owned twice"
            assert alloc.pages_allocated(pages)
            assert len(pages) == held == alloc.num_pages - alloc.available_pages  # nothing leaks

    @invariant()
    def tiers_nest(self):
        closed_backups = self.tree.policy.name != "write_back"
        for x in self.tree.iter_nodes():
            assert x.dev is not None or x.host is not None
            if x.parent is not self.tree.root:
                assert x.dev is None or x.parent.dev is not None  # L1 is a prefix of every path
                if closed_backups:
                    assert x.host is None or x.parent.host is not None  # L2 holds whole prefixes

    @invariant()
    def locks_hold(self):
        want = {}
        holders = [n for n, _, _ in self.locks] + [t.lock_node for t in self.pending]
        for node in holders:
            while node is not self.tree.root:
                want[node.id] = want.get(node.id, 0) + 1
                node = node.parent
        for x in self.tree.iter_nodes():
            assert x.lock_ref == want.get(x.id, 0)
        for node, had_dev, had_host in self.locks:
            x = node
            while x is not self.tree.root:  # still attached
                assert x.parent.children[x.key[: 4 * PS]] is x
                x = x.parent
            assert node.dev is not None or not had_dev, "a locked node left L1"
            assert node.host is not None or not had_host, "a locked node left L2"

    @invariant()
    def nothing_appears_from_nowhere(self):
        assert set(self.present()) <= self.ever

    def teardown(self):
        if hasattr(self, "host_pool"):
            self.host_pool.close()


TreeAndPools.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
test_tree_and_pools = TreeAndPools.TestCase
test_tree_and_pools.pytestmark = [pytest.mark.slow]  # many generated sequences over real pools
