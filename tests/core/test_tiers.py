"""Tier moves (hicache_ref.core.tiers): how much each eviction rule frees, the tiers' page counters against the allocators, LRU and lock-respecting eviction, write-back, load-back gates, per-node backups, duplicate reclaim."""

import numpy as np
import pytest

from hicache_ref.core.allocator import PageAllocator
from hicache_ref.core.radix import RadixTree
from hicache_ref.spec import CacheSpec

PS = 2


def make_tree(policy="write_through", dev_tokens=64, host_tokens=64, **switches):
    dev, host = PageAllocator(dev_tokens, PS), PageAllocator(host_tokens, PS)
    spec = CacheSpec.of(page_size=PS, write_policy=policy, **switches)
    return RadixTree(spec, device=dev, host=host), dev, host


def insert(tree, tokens):
    """Allocate, insert, give back what the tree did not adopt, land every backup at once."""
    idx = tree.device.alloc(len(tokens))
    r = tree.insert(tokens, idx)
    tree.device.free(idx[: r.prefix_len])
    for t in r.backups:
        tree.tiers.complete(t)
    return r


def assert_counters_match(tree, dev, host):
    """What users read as the tree's occupancy is what its allocators hold."""
    assert tree.tiers.device_pages * PS == dev.used_tokens
    assert tree.tiers.host_pages * PS == host.used_tokens
    nodes = list(tree.iter_nodes())
    assert tree.tiers.device_pages == sum(len(x.dev) for x in nodes if x.dev is not None)
    assert tree.tiers.host_pages == sum(len(x.host) for x in nodes if x.host is not None)
    assert tree.tiers.num_nodes == len([x for x in nodes if x is not tree.root])


class Freer:
    """An `evict` callable over a real allocator: records what it is asked, frees that many tokens of held pages."""

    def __init__(self, allocator, held_pages):
        self.allocator, self.held, self.asked = allocator, list(held_pages), []

    def __call__(self, n_tokens):
        self.asked.append(n_tokens)
        k = min(len(self.held), -(-n_tokens // PS))
        self.allocator.free_pages(np.array(self.held[:k], dtype=np.int64))
        self.held = self.held[k:]


def short_allocator(free_pages, total_pages=8):
    """A PageAllocator with `free_pages` free; the rest held by a Freer."""
    a = PageAllocator(total_pages * PS, PS)
    held = a.alloc_pages(total_pages - free_pages)
    return a, Freer(a, held.tolist())


# -- how much each rule evicts -------------------------------------------------------------

def test_shortfall_evicts_only_the_missing_pages():
    tree, _, _ = make_tree(evict_size="shortfall")
    a, ev = short_allocator(free_pages=2)
    pages = tree.tiers.take_pages(a, 4, ev)
    assert ev.asked == [2 * PS] and len(pages) == 4 and a.available_pages == 0


def test_shortfall_asks_nothing_when_the_allocation_fits():
    tree, _, _ = make_tree(evict_size="shortfall")
    a, ev = short_allocator(free_pages=4)
    assert len(tree.tiers.take_pages(a, 3, ev)) == 3 and ev.asked == []


def test_whole_evicts_the_whole_allocation_or_the_tokens_given():
    tree, _, _ = make_tree(evict_size="whole")
    a, ev = short_allocator(free_pages=2)
    assert len(tree.tiers.take_pages(a, 4, ev)) == 4 and ev.asked == [4 * PS]
    a, ev = short_allocator(free_pages=2)
    assert len(tree.tiers.take_pages(a, 1, ev, evict_tokens=10)) == 1 and ev.asked == [10]
    a, ev = short_allocator(free_pages=5)  # 10 tokens free: not fewer than asked, no eviction
    assert len(tree.tiers.take_pages(a, 1, ev, evict_tokens=10)) == 1 and ev.asked == []


def test_demand_shortfall_evicts_what_the_demand_exceeds_the_free_tokens_by():
    tree, _, _ = make_tree(evict_size="demand_shortfall")
    a, ev = short_allocator(free_pages=2)  # 4 tokens free
    assert len(tree.tiers.take_pages(a, 1, ev, evict_tokens=10)) == 1 and ev.asked == [6]
    a, ev = short_allocator(free_pages=2)  # without a demand: the shortfall
    assert len(tree.tiers.take_pages(a, 3, ev)) == 3 and ev.asked == [1 * PS]


@pytest.mark.parametrize("rule", ["whole", "shortfall", "demand_shortfall"])
def test_still_short_gives_none_or_with_partial_the_free_pages(rule):
    tree, _, _ = make_tree(evict_size=rule)
    a = PageAllocator(8 * PS, PS)
    a.alloc_pages(6)
    assert tree.tiers.take_pages(a, 4, lambda n: None) is None and a.available_pages == 2
    assert len(tree.tiers.take_pages(a, 4, lambda n: None, partial=True)) == 2


def test_extend_demand_per_rule():
    assert make_tree(evict_size="shortfall")[0].tiers.extend_demand(7) == 7 + PS
    assert make_tree(evict_size="whole")[0].tiers.extend_demand(7) == 7 + PS
    assert make_tree(evict_size="demand_shortfall")[0].tiers.extend_demand(7) == 7 + PS
    spec = CacheSpec.of(page_size=1, write_policy="write_through", evict_size="demand_shortfall")
    assert RadixTree(spec, device=PageAllocator(8, 1)).tiers.extend_demand(7) == 7  # pages of 1 token


def test_an_unknown_rule_is_refused_naming_the_option():
    from hicache_ref.core.tiers import TierMoves

    tree, _, _ = make_tree()
    for name in ("evict_size", "backup_alloc", "host_reclaim"):
        with pytest.raises(ValueError, match=f"^{name}: 'nope' is not one of"):
            TierMoves(tree.root, PS, tree.policy, **{name: "nope"})


# -- eviction and accounting ---------------------------------------------------------------

def test_counters_follow_insert_evict_evict_host_and_load_back():
    tree, dev, host = make_tree("write_through")
    insert(tree, list(range(8)))
    insert(tree, [100 + i for i in range(6)])
    assert_counters_match(tree, dev, host)
    assert (tree.tiers.device_pages, tree.tiers.host_pages, tree.tiers.num_nodes) == (7, 7, 2)
    r = tree.tiers.evict(8)  # the older leaf (4 pages) first, then the other: both keep host copies
    assert r.evicted_tokens >= 8 and r.dropped_nodes == 0
    assert tree.tiers.device_pages < 7 and tree.tiers.host_pages == 7
    assert_counters_match(tree, dev, host)
    m = tree.match_prefix(list(range(8)))
    t = tree.tiers.load_back(m)
    assert t is not None and t.kind == "load"
    tree.tiers.complete(t)
    assert tree.match_prefix(list(range(8))).device_len == 8
    assert_counters_match(tree, dev, host)
    tree.tiers.evict(64)
    h = tree.tiers.evict_host(64)
    assert h.evicted_tokens == 14 and tree.tiers.host_pages == 0 and tree.tiers.num_nodes == 0
    assert_counters_match(tree, dev, host)


def test_evict_takes_the_least_recently_used_leaf_first():
    tree, _, _ = make_tree("write_through")
    insert(tree, [1, 2, 3, 4])
    insert(tree, [5, 6, 7, 8])
    tree.match_prefix([1, 2, 3, 4])  # touched: now the newer
    tree.tiers.evict(4)
    assert tree.match_prefix([5, 6, 7, 8]).device_len == 0
    assert tree.match_prefix([1, 2, 3, 4]).device_len == 4


def test_evict_never_takes_a_locked_node_and_keeps_it_for_later():
    tree, _, _ = make_tree("write_through")
    r = insert(tree, [1, 2, 3, 4])
    (node,) = r.new_nodes
    tree.tiers.lock(node)
    assert tree.tiers.evict(4).evicted_tokens == 0
    assert tree.match_prefix([1, 2, 3, 4]).device_len == 4
    tree.tiers.unlock(node)
    assert tree.tiers.evict(4).evicted_tokens == 4
    assert tree.match_prefix([1, 2, 3, 4]).device_len == 0


def test_without_a_host_copy_a_node_is_dropped_and_its_slots_freed():
    tree, dev, host = make_tree("write_through_selective")  # not backed up on first insert
    insert(tree, [1, 2, 3, 4])
    r = tree.tiers.evict(4)
    assert r.dropped_nodes == 1 and r.write_backs == [] and len(r.freed_device_indices) == 4
    assert tree.tiers.num_nodes == 0 and dev.used_tokens == 0
    assert_counters_match(tree, dev, host)


def test_write_back_copies_before_freeing_and_the_node_stays_in_l2():
    tree, dev, host = make_tree("write_back")
    insert(tree, [1, 2, 3, 4])
    seen = []

    def on_write_back(copies):
        # the device slots are still held while the copy runs
        seen.append([(t.kind, len(t.device_pages), dev.used_tokens, tree.tiers.device_pages, t.done)
                     for t in copies])

    r = tree.tiers.evict(4, on_write_back=on_write_back)
    assert seen == [[("write_back", 2, 4, 2, False)]] and [t.kind for t in r.write_backs] == ["write_back"]
    assert dev.used_tokens == 0 and host.used_tokens == 4
    m = tree.match_prefix([1, 2, 3, 4])
    assert (m.device_len, m.host_len) == (0, 4)
    assert_counters_match(tree, dev, host)


def test_negative_or_fractional_token_counts_are_refused_naming_n_tokens():
    tree, _, _ = make_tree()
    for bad in (-1, 2.5, "4"):
        with pytest.raises(ValueError, match="^n_tokens:"):
            tree.tiers.evict(bad)
        with pytest.raises(ValueError, match="^n_tokens:"):
            tree.tiers.evict_host(bad)


# -- load back -------------------------------------------------------------------------------

def evicted_chain(**switches):
    tree, dev, host = make_tree("write_through", **switches)
    insert(tree, list(range(8)))
    tree.tiers.evict(64)
    return tree, tree.match_prefix(list(range(8)))


def test_load_back_gates_min_tokens_and_quota():
    tree, m = evicted_chain()
    assert tree.tiers.load_back(m, min_tokens=9) is None
    assert tree.tiers.load_back(m, quota=7) is None
    assert tree.tiers.device_pages == 0  # a refused load takes nothing
    t = tree.tiers.load_back(m, min_tokens=8, quota=8)
    assert t is not None and len(t.device_pages) == 4 and tree.tiers.device_pages == 4


def test_the_quota_counts_the_ancestors_a_lock_would_newly_protect():
    tree, _, _ = make_tree("write_through")
    insert(tree, list(range(8)))
    insert(tree, list(range(4)))  # split: [0..3] and its child [4..7]
    tree.match_prefix(list(range(4)))  # [0..3] touched: the child is the LRU leaf
    tree.tiers.evict(4)
    m = tree.match_prefix(list(range(8)))
    assert (m.device_len, m.host_len) == (4, 4)
    assert tree.tiers.load_back(m, quota=7) is None  # 4 tokens to load + 4 the lock newly protects
    assert tree.tiers.load_back(m, quota=8) is not None


def test_a_loaded_chain_stays_locked_until_complete_and_completes_once():
    tree, m = evicted_chain()
    t = tree.tiers.load_back(m)
    assert tree.tiers.evict(64).evicted_tokens == 0  # locked while the H2D is in flight
    tree.tiers.complete(t)
    with pytest.raises(ValueError, match="^copy: already completed"):
        tree.tiers.complete(t)
    assert tree.tiers.evict(64).evicted_tokens == 8


def test_load_back_with_no_room_after_eviction_is_none_and_unlocks():
    tree, dev, host = make_tree("write_through", dev_tokens=8)
    insert(tree, list(range(8)))
    tree.tiers.evict(8)
    m = tree.match_prefix(list(range(8)))
    other = dev.alloc(4)  # held by a caller: the tree cannot evict it
    assert tree.tiers.load_back(m) is None
    assert all(x.lock_ref == 0 for x in tree.iter_nodes())
    dev.free(other)
    assert tree.tiers.load_back(m) is not None


# -- backups -------------------------------------------------------------------------------

def two_node_chain(backup_alloc, host_tokens):
    """Two device-only nodes on one path (write_back inserts no backup), a host too small for both."""
    tree, dev, host = make_tree("write_back", host_tokens=host_tokens, backup_alloc=backup_alloc)
    insert(tree, [1, 2, 3, 4])
    r = insert(tree, [1, 2, 3, 4, 5, 6, 7, 8])
    (b,) = r.new_nodes
    return tree, host, [b.parent, b]


def test_whole_chain_backup_is_all_or_nothing():
    tree, host, nodes = two_node_chain("whole_chain", host_tokens=6)
    assert tree.tiers.back_up(nodes) is None
    assert host.used_tokens == 0 and all(x.host is None and x.lock_ref == 0 for x in nodes)


def test_per_node_backup_keeps_the_nodes_before_the_first_without_room():
    tree, host, nodes = two_node_chain("per_node", host_tokens=6)
    t = tree.tiers.back_up(nodes)
    assert t.nodes == nodes[:1] and nodes[0].host is not None and nodes[1].host is None
    assert host.used_tokens == 4 and tree.tiers.host_pages == 2
    assert nodes[0].lock_ref == 1 and nodes[1].lock_ref == 0  # locked at the last backed-up node
    tree.tiers.complete(t)
    assert nodes[0].lock_ref == 0


def test_per_node_backup_stops_at_the_first_node_without_room():
    tree, _, host = make_tree("write_back", host_tokens=8, backup_alloc="per_node")
    insert(tree, list(range(4)))  # 2 pages
    insert(tree, list(range(10)))  # + 3 pages
    c = insert(tree, list(range(12))).new_nodes[0]  # + 1 page: would fit after the second fails
    nodes = [c.parent.parent, c.parent, c]
    t = tree.tiers.back_up(nodes)
    assert t.nodes == nodes[:1] and [x.host is not None for x in nodes] == [True, False, False]
    assert host.used_tokens == 4


@pytest.mark.parametrize("backup_alloc", ["whole_chain", "per_node"])
def test_a_backup_with_room_copies_the_whole_chain_in_order(backup_alloc):
    tree, host, nodes = two_node_chain(backup_alloc, host_tokens=64)
    t = tree.tiers.back_up(nodes)
    assert t.nodes == nodes and t.device_pages.tolist() == np.concatenate([x.dev for x in nodes]).tolist()
    assert t.host_pages.tolist() == np.concatenate([x.host for x in nodes]).tolist()


# -- L2 reclaim ------------------------------------------------------------------------------

def test_duplicates_first_frees_copies_also_in_l1_before_host_only_leaves():
    tiers_of = {}
    for reclaim in ("leaves", "duplicates_first"):
        tree, dev, host = make_tree("write_back", host_reclaim=reclaim)
        a = insert(tree, [1, 2, 3, 4]).new_nodes[0]
        b = insert(tree, [5, 6, 7, 8]).new_nodes[0]
        tree.tiers.evict(8)  # both written back: host-only
        tree.tiers.complete(tree.tiers.load_back(tree.match_prefix([1, 2, 3, 4])))  # a: on both tiers
        assert tree.tiers.evict_host(4).evicted_tokens == 4
        tiers_of[reclaim] = [(x.dev is not None, x.host is not None) for x in (a, b)]
        assert b.parent is None or b.host is not None  # b is dropped or keeps its only copy
        assert_counters_match(tree, dev, host)
    assert tiers_of["leaves"] == [(True, True), (False, False)]  # the host-only leaf goes
    assert tiers_of["duplicates_first"] == [(True, False), (False, True)]  # a's L2 copy goes, b is spared
