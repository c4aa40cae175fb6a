"""Radix tree: page-granular match and split, insert ownership, LRU eviction on both tiers, load back, locks."""

import numpy as np
import pytest

from hicache_ref.core.allocator import PageAllocator
from hicache_ref.core.hashing import page_hashes
from hicache_ref.core.radix import MatchResult, RadixTree
from hicache_ref.spec import CacheSpec
from tests import checked_run

PS = 2



def tree_spec(page_size, policy="write_through_selective", **switches):
    """The spec a bare tree reads: page size, write policy and the request-path switches."""
    return CacheSpec.of(page_size=page_size, write_policy=policy, **switches)

def make_tree(policy="write_through", dev_tokens=64, host_tokens=64, **kw):
    dev, host = PageAllocator(dev_tokens, PS), PageAllocator(host_tokens, PS)
    switches = {k: kw.pop(k) for k in ("hit_count", "backup_scope", "evict_size") if k in kw}
    return RadixTree(tree_spec(PS, policy, **switches), device=dev, host=host, **kw), dev, host


def insert(tree, tokens, **kw):
    """Allocate, insert, give back what the tree did not adopt, land every copy at once."""
    n = len(tokens) // PS * PS
    idx = tree.device.alloc(n)
    if idx is None:
        tree.tiers.evict(n)
        idx = tree.device.alloc(n)
    r = tree.insert(tokens, idx, **kw)
    tree.device.free(idx[: r.prefix_len])
    for t in r.backups:
        tree.tiers.complete(t)
    return r, idx


def test_empty_tree_and_empty_query():
    tree, _, _ = make_tree()
    m = tree.match_prefix([1, 2, 3, 4])
    assert (m.device_len, m.host_len) == (0, 0) and m.last_device_node is tree.root is m.last_host_node
    assert len(m.device_indices) == 0 and m.device_indices.dtype == np.int64
    assert tree.match_prefix([]).device_len == 0


def test_match_is_page_granular_and_returns_the_inserted_slots():
    tree, _, _ = make_tree()
    _, idx = insert(tree, [1, 2, 3, 4, 5, 6, 7])  # the partial last page is not cached
    m = tree.match_prefix(np.array([1, 2, 3, 4, 5, 6, 7, 8]))
    assert m.device_len == 6 and m.device_indices.tolist() == idx[:6].tolist()
    assert tree.match_prefix([1, 2, 3, 9]).device_len == 2  # diverges inside page 2
    assert tree.match_prefix([1, 9]).device_len == 0  # diverges inside page 1
    for same in ([1, 2, 3, 4, 5, 6, 7, 8], (1, 2, 3, 4, 5, 6, 7), np.arange(1, 9, dtype=np.uint32)):
        assert tree.match_prefix(same).device_indices.tolist() == idx[:6].tolist()


def test_match_splits_the_node_it_ends_in():
    tree, _, _ = make_tree()
    r, idx = insert(tree, list(range(8)))
    (node,) = r.new_nodes
    m = tree.match_prefix([0, 1, 2, 3, 99, 99])
    assert m.device_len == 4 and m.last_device_node is not node
    assert m.last_device_node.parent is tree.root and node.parent is m.last_device_node
    assert len(m.last_device_node.key) == 4 * 4 and len(node.key) == 4 * 4
    assert tree.match_prefix(range(8)).device_indices.tolist() == idx.tolist()  # the split lost nothing


def test_insert_adopts_only_the_new_part():
    tree, dev, _ = make_tree("write_back")
    insert(tree, [1, 2, 3, 4])
    idx = dev.alloc(8)
    r = tree.insert([1, 2, 3, 4, 5, 6, 7, 8], idx)
    assert (r.prefix_len, r.new_pages, r.adopted_len) == (4, 2, 0)
    assert tree.match_prefix([1, 2, 3, 4, 5, 6, 7, 8]).device_indices[4:].tolist() == idx[4:].tolist()
    dev.free(idx[:4])
    assert dev.used_tokens == tree.tiers.device_pages * PS == 8


def test_insert_over_host_only_nodes_takes_the_recomputed_slots():
    tree, dev, _ = make_tree("write_through")
    insert(tree, [1, 2, 3, 4])
    tree.tiers.evict(64)
    assert tree.match_prefix([1, 2, 3, 4]).host_len == 4
    r, idx = insert(tree, [1, 2, 3, 4, 5, 6])
    assert (r.prefix_len, r.adopted_len, r.new_pages) == (0, 4, 1)
    m = tree.match_prefix([1, 2, 3, 4, 5, 6])
    assert (m.device_len, m.host_len) == (6, 0) and m.device_indices.tolist() == idx.tolist()


def test_insert_rejects_bad_indices_before_changing_anything():
    tree, dev, _ = make_tree()
    idx = dev.alloc(4)
    for bad in (idx[:2], idx[[1, 0, 2, 3]], np.array([40, 41, 42, 43]), None):
        with pytest.raises(ValueError, match="device_indices"):
            tree.insert([1, 2, 3, 4], bad)
    with pytest.raises(ValueError, match="tokens"):
        tree.insert([1, -2, 3, 4], idx)
    assert tree.match_prefix([1, 2, 3, 4]).device_len == 0 and not tree.root.children


def test_evict_is_lru_over_leaves():
    tree, dev, _ = make_tree("write_back", host_tokens=0)  # no L2: a plain radix cache
    insert(tree, [1, 1, 2, 2])
    insert(tree, [3, 3, 4, 4])
    insert(tree, [1, 1, 2, 2, 5, 5])
    tree.match_prefix([3, 3, 4, 4])  # now [1 1 2 2 | 5 5] is the least recently used path
    e = tree.tiers.evict(2)
    assert e.evicted_tokens == 2 and e.dropped_nodes == 1
    assert tree.match_prefix([1, 1, 2, 2, 5, 5]).device_len == 4
    assert tree.match_prefix([3, 3, 4, 4]).device_len == 4
    tree.tiers.evict(4)  # next: [1 1 2 2], now a leaf and older than [3 3 4 4]
    assert tree.match_prefix([1, 1, 2, 2]).device_len == 0 and tree.match_prefix([3, 3, 4, 4]).device_len == 4
    assert dev.used_tokens == tree.tiers.device_pages * PS == 4


def test_lru_uses_the_logical_clock_not_wall_time():
    ticks = iter([10, 5, 1, 20, 21])  # a caller's clock: the second insert is "older" than the first
    tree = RadixTree(tree_spec(PS, "write_back"), clock=lambda: next(ticks), device=PageAllocator(16, PS))
    for tokens in ([1, 1], [2, 2]):
        tree.insert(tokens, tree.device.alloc(2))
    tree.match_prefix([7, 7])  # tick 1: touches nothing but the root
    tree.tiers.evict(2)
    assert tree.match_prefix([1, 1]).device_len == 2 and tree.match_prefix([2, 2]).device_len == 0


@pytest.mark.parametrize("compacted", [False, True])
def test_lru_ties_go_to_the_older_node_on_both_tiers(compacted):
    """The documented rule: equal last access evicts the node created first (deterministic),
    also after the eviction heaps were compacted (rebuilt from the tree)."""
    tree = RadixTree(tree_spec(PS, "write_through"), clock=lambda: 5, device=PageAllocator(16, PS),
                     host=PageAllocator(16, PS))  # one tick for everything: every access ties
    for tokens in ([1, 1], [2, 2], [3, 3]):
        r = tree.insert(tokens, tree.device.alloc(2))
        for t in r.backups:
            tree.tiers.complete(t)
    for _ in range(700 if compacted else 0):  # touches queue entries until the heaps compact
        for tokens in ([3, 3], [2, 2], [1, 1]):
            tree.match_prefix(tokens)
    tree.tiers.evict(2)
    assert [tree.match_prefix(t).device_len for t in ([1, 1], [2, 2], [3, 3])] == [0, 2, 2]
    tree.tiers.evict(4)  # L1 empty; the host tier ties too
    tree.tiers.evict_host(2)
    assert [tree.match_prefix(t).host_len for t in ([1, 1], [2, 2], [3, 3])] == [0, 2, 2]


def test_locked_nodes_are_not_evicted_from_either_tier():
    tree, dev, host = make_tree("write_through")
    insert(tree, [1, 2, 3, 4])
    m = tree.match_prefix([1, 2, 3, 4])
    tree.lock(m.last_device_node)
    assert tree.tiers.evict(64).evicted_tokens == 0
    tree.unlock(m.last_device_node)
    assert tree.tiers.evict(64).evicted_tokens == 4
    m = tree.match_prefix([1, 2, 3, 4])
    tree.lock(m.last_host_node)
    assert tree.tiers.evict_host(64).evicted_tokens == 0
    tree.unlock(m.last_host_node)
    e = tree.tiers.evict_host(64)
    assert e.evicted_tokens == 4 and host.used_tokens == 0 and not tree.root.children
    with pytest.raises(ValueError, match="not in the tree"):
        tree.unlock(m.last_host_node)
    insert(tree, [5, 6])
    with pytest.raises(ValueError, match="unlock"):
        tree.unlock(tree.match_prefix([5, 6]).last_device_node)


def test_evict_host_takes_host_only_leaves_lru_and_keeps_copies_of_device_nodes():
    tree, dev, host = make_tree("write_through")
    insert(tree, [1, 1, 2, 2])
    insert(tree, [1, 1, 3, 3])
    insert(tree, [4, 4])
    tree.tiers.evict(64)
    insert(tree, [4, 4])  # back in L1 (adopted); its L2 copy is kept
    tree.match_prefix([1, 1, 3, 3])
    e = tree.tiers.evict_host(2)  # oldest host-only leaf: [2 2]
    assert e.evicted_tokens == 2 and len(e.freed_host_indices) == 2
    assert tree.match_prefix([1, 1, 2, 2]).host_len == 2 and tree.match_prefix([1, 1, 3, 3]).host_len == 4
    tree.tiers.evict_host(64)  # then [3 3], then [1 1] once it is a leaf; never [4 4], which is in L1
    assert not tree.match_prefix([1, 1]).host_len and tree.match_prefix([4, 4]).device_len == 2
    assert host.used_tokens == tree.tiers.host_pages * PS == 2


def test_load_back_hands_out_host_to_device_pairs_and_locks_until_complete():
    tree, dev, host = make_tree("write_through")
    insert(tree, [1, 2, 3, 4, 5, 6])
    tree.tiers.evict(64)
    insert(tree, [1, 2])  # device part [1 2], host-only tail [3 4 5 6]
    m = tree.match_prefix([1, 2, 3, 4, 5, 6])
    assert (m.device_len, m.host_len) == (2, 4)
    t = tree.tiers.load_back(m)
    assert t.kind == "load" and t.host_indices.tolist() == m.host_indices.tolist() and t.num_tokens == 4
    assert dev.is_allocated(t.device_indices).all()
    after = tree.match_prefix([1, 2, 3, 4, 5, 6])
    assert (after.device_len, after.host_len) == (6, 0) and after.device_indices[2:].tolist() == t.device_indices.tolist()
    assert tree.tiers.evict(64).evicted_tokens == 0  # loading: locked
    tree.tiers.complete(t)
    assert tree.tiers.evict(64).evicted_tokens == 6
    assert tree.tiers.load_back(tree.root) is None and tree.tiers.load_back(tree.match_prefix([1, 2]), min_tokens=10) is None


def test_load_back_evicts_l1_to_make_room_but_not_its_own_chain():
    tree, dev, host = make_tree("write_through", dev_tokens=8)
    insert(tree, [1, 1, 2, 2, 3, 3])
    tree.tiers.evict(8)
    insert(tree, [7, 7, 8, 8])  # 4 of 8 device slots; the load needs 6
    t = tree.tiers.load_back(tree.match_prefix([1, 1, 2, 2, 3, 3]).last_host_node)
    assert t is not None and t.num_tokens == 6
    assert tree.match_prefix([7, 7, 8, 8]).device_len == 0 and tree.match_prefix([7, 7, 8, 8]).host_len == 4


def test_load_back_gives_up_when_l1_is_locked_full():
    tree, dev, host = make_tree("write_through", dev_tokens=4)
    insert(tree, [1, 1, 2, 2])
    tree.tiers.evict(4)
    r, _ = insert(tree, [5, 5, 6, 6])
    tree.lock(r.last_node)
    assert tree.tiers.load_back(tree.match_prefix([1, 1, 2, 2])) is None
    assert tree.match_prefix([1, 1, 2, 2]).last_host_node.lock_ref == 0  # nothing left locked


def test_load_back_of_a_node_that_left_the_tree_names_target():
    tree, dev, host = make_tree("write_through")
    insert(tree, [1, 1, 2, 2])
    tree.tiers.evict(64)
    m = tree.match_prefix([1, 1, 2, 2])
    tree.tiers.evict_host(64)  # gone from both tiers: out of the tree
    for target in (m, m.last_host_node):
        with pytest.raises(ValueError, match="target: .* no longer in the tree"):
            tree.tiers.load_back(target)
    assert dev.used_tokens == 0 and tree.root.lock_ref == 0


def test_write_back_without_host_room_drops_the_node():
    tree, dev, host = make_tree("write_back", host_tokens=2)
    insert(tree, [1, 1, 2, 2])
    e = tree.tiers.evict(4)
    assert e.write_backs == [] and e.dropped_nodes == 1 and host.used_tokens == 0 and dev.used_tokens == 0


def test_node_hashes_are_the_chained_page_hashes():
    tree, _, _ = make_tree()
    insert(tree, [1, 2, 3, 4, 5, 6])
    m = tree.match_prefix([1, 2, 3, 4, 9, 9])  # splits: hashes of each part continue the chain
    lower = next(iter(m.last_device_node.children.values()))
    assert tree.node_hashes(m.last_device_node) + tree.node_hashes(lower) == page_hashes([1, 2, 3, 4, 5, 6], PS)


def test_match_result_fields():
    assert MatchResult._fields == ("device_len", "host_len", "last_device_node", "last_host_node",
                                   "device_indices", "host_indices")


def test_bad_arguments():
    with pytest.raises(ValueError, match="page-size"):
        RadixTree(tree_spec(0))
    with pytest.raises(ValueError, match="device"):
        RadixTree(tree_spec(4), device=PageAllocator(16, 2))
    tree, _, _ = make_tree()
    with pytest.raises(ValueError, match="n_tokens"):
        tree.tiers.evict(-1)
    with pytest.raises(ValueError, match="load_back"):
        RadixTree(tree_spec(PS)).tiers.load_back(tree.root)


def transcript(policy, order, seed=3):
    """Every index the tree hands out over a fixed random op sequence, from fresh objects."""
    rng = np.random.default_rng(seed)
    dev, host = PageAllocator(40, PS, order), PageAllocator(40, PS, order)
    tree = RadixTree(tree_spec(PS, policy), device=dev, host=host)
    convs = [rng.integers(0, 3, 16).tolist() for _ in range(4)]
    out = []
    for _ in range(200):
        op, seq = rng.integers(5), convs[rng.integers(4)][: rng.integers(0, 17)]
        if op <= 1:
            r, _ = insert(tree, seq, request_id=int(rng.integers(3)), finished=bool(rng.integers(2)))
            out.append(("insert", r.prefix_len, r.new_pages))
        elif op == 2:
            e = tree.tiers.evict(int(rng.integers(0, 12)), on_write_back=lambda ts: None)
            out.append(("evict", e.freed_device_indices.tolist(), [t.host_indices.tolist() for t in e.write_backs]))
        elif op == 3:
            out.append(("evict_host", tree.tiers.evict_host(int(rng.integers(0, 12))).freed_host_indices.tolist()))
        else:
            t = tree.tiers.load_back(tree.match_prefix(seq))
            if t is not None:
                tree.tiers.complete(t)
                out.append(("load", t.device_indices.tolist(), t.host_indices.tolist()))
        m = tree.match_prefix(seq)
        out.append((m.device_indices.tolist(), m.host_indices.tolist()))
    return out


@pytest.mark.parametrize("policy", ["write_back", "write_through", "write_through_selective"])
@pytest.mark.parametrize("order", ["fifo", "lifo"])
@pytest.mark.slow
def test_same_operations_give_same_indices_on_every_rank(policy, order):
    first = transcript(policy, order)
    assert any(op[0] == "load" for op in first if isinstance(op[0], str))  # the sequence reaches load back
    assert transcript(policy, order) == first


@pytest.mark.slow  # runs the command or pytest in a child process
def test_indices_do_not_depend_on_hash_seed_or_process():
    import json
    import os
    import sys

    code = ("import json, sys; from tests.core.test_radix import transcript; "
            "print(json.dumps(transcript('write_through_selective', 'lifo')))")
    runs = [checked_run.run([sys.executable, "-c", code],
                           cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert runs[0] == runs[1] == json.dumps(transcript("write_through_selective", "lifo")) + "\n"


def test_write_backs_of_one_eviction_never_share_host_slots():
    # Host room for one node: the second write-back must not take the first's (still
    # uncopied) host slots by evicting it from L2; it is dropped instead.
    tree, dev, host = make_tree("write_back", host_tokens=2)
    insert(tree, [1, 1])
    insert(tree, [2, 2])
    e = tree.tiers.evict(4, on_write_back=lambda ts: None)
    slots = [s for t in e.write_backs for s in t.host_indices.tolist()]
    assert len(slots) == len(set(slots))
    assert len(e.write_backs) == 1 and e.dropped_nodes == 1
    hits = [tree.match_prefix(t).host_len for t in ([1, 1], [2, 2])]
    assert sorted(hits) == [0, 2] and host.used_tokens == 2  # the written-back node kept its L2 copy


def test_write_backs_of_nodes_dropped_later_in_the_same_eviction_are_not_copied():
    # A=[1 2 3 4] with children B, C and a sibling D; host room for 2 pages. B and C are
    # written back (host full), then A, now a leaf, finds no room and is dropped with its
    # subtree, freeing B's and C's host slots, which D's write-back then takes.
    tree, dev, host = make_tree("write_back", host_tokens=4)
    insert(tree, [1, 2, 3, 4, 5, 6])
    insert(tree, [1, 2, 3, 4, 7, 8])
    insert(tree, [9, 9])
    copied = []
    e = tree.tiers.evict(100, on_write_back=copied.extend)
    assert copied == e.write_backs and len(copied) == 1
    slots = [s for t in copied for s in t.host_indices.tolist()]
    assert len(slots) == len(set(slots))
    assert all(x.parent is not None and x.host is not None for t in copied for x in t.nodes)
    assert tree.match_prefix([9, 9]).host_len == 2 and tree.match_prefix([1, 2, 3, 4]).host_len == 0
    assert e.evicted_tokens == 10 and dev.used_tokens == tree.tiers.device_pages == 0
    assert host.used_tokens == tree.tiers.host_pages * PS == 2


def test_insert_refuses_a_page_given_twice_and_an_unhashable_request_id_before_changing_anything():
    tree, dev, _ = make_tree()
    insert(tree, list(range(8)))
    before = [(len(x.key), x.dev.tolist()) for x in tree.iter_nodes()]
    idx = dev.alloc(4)
    twice = np.concatenate([idx[:2], idx[:2], dev.alloc(4)])  # page idx[0] for pages 1 and 2
    with pytest.raises(ValueError, match="device_indices: the same page"):
        tree.insert([0, 1, 2, 3, 90, 91, 92, 93], twice)  # would split [0..7] after 2 pages
    with pytest.raises(ValueError, match="request_id"):
        tree.insert([0, 1, 2, 3, 90, 91], np.concatenate([idx, dev.alloc(2)]), request_id=["r1"])
    assert [(len(x.key), x.dev.tolist()) for x in tree.iter_nodes()] == before  # no split, nothing adopted
    assert tree.tiers.device_pages == 4 and tree.policy.requests_in_flight == 0


def test_a_short_tier_is_evicted_by_the_shortfall_only():
    # L1 of 4 pages: a 3-page load back with 1 page free evicts 2 pages, not 3.
    tree, dev, host = make_tree("write_through", dev_tokens=8)
    insert(tree, [1, 1, 2, 2, 3, 3])
    tree.tiers.evict(8)
    for t in ([7, 7], [8, 8], [9, 9]):
        insert(tree, t)
    t = tree.tiers.load_back(tree.match_prefix([1, 1, 2, 2, 3, 3]))
    assert t is not None and t.num_tokens == 6
    assert [tree.match_prefix(x).device_len for x in ([7, 7], [8, 8], [9, 9])] == [0, 0, 2]
    # L2 of 4 pages, 1 free: a 2-page backup evicts 1 host-only page, not 2.
    tree, dev, host = make_tree("write_through", host_tokens=8)
    for x in ([1, 1], [2, 2], [3, 3]):
        insert(tree, x)
    tree.tiers.evict(64)
    insert(tree, [4, 4, 5, 5])
    assert [tree.match_prefix(x).host_len for x in ([1, 1], [2, 2], [3, 3])] == [0, 2, 2]
    assert host.used_tokens == tree.tiers.host_pages * PS == 8


def test_page_level_match_and_insert_agree_with_the_slot_level_ones():
    slot_tree, sdev, _ = make_tree("write_through")
    page_tree, pdev, _ = make_tree("write_through")
    for tokens in ([1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 9, 9], [1, 2]):
        r = insert(slot_tree, tokens, request_id="a")[0]
        pages = pdev.alloc_pages(len(tokens) // PS)
        p = page_tree.insert_pages(tokens, pages, request_id="a")
        pdev.free_pages(pages[: p.prefix_len // PS])
        for t in p.backups:
            page_tree.tiers.complete(t)
        assert (p.prefix_len, p.adopted_len, p.new_pages) == (r.prefix_len, r.adopted_len, r.new_pages)
        assert [(t.num_tokens, t.host_indices.tolist()) for t in p.backups] == \
            [(t.num_tokens, t.host_indices.tolist()) for t in r.backups]
        m, pm = slot_tree.match_prefix(tokens), page_tree.match_pages(tokens)
        assert m.device_indices.tolist() == [s for q in pm.device_pages.tolist() for s in range(q * PS, (q + 1) * PS)]
        assert len(pm.host_pages) * PS == m.host_len


def test_insert_pages_checks_its_pages_like_insert_checks_slots():
    tree, dev, _ = make_tree()
    pages = dev.alloc_pages(2)
    for bad, why in ((pages[:1], "1 pages for 2"), (pages.reshape(1, 2), "1-D"), (pages[[0, 0]], "same page"),
                     (np.array([30, 31]), "not allocated"), (pages.astype(float), "integer")):
        with pytest.raises(ValueError, match=f"device_pages: .*{why}"):
            tree.insert_pages([1, 2, 3, 4], bad)
    with pytest.raises(ValueError, match="request_id"):
        tree.insert_pages([1, 2, 3, 4], pages, request_id={})
    assert not tree.root.children and tree.tiers.device_pages == 0
    assert tree.insert_pages([1, 2, 3, 4], pages).new_pages == 2
