"""Ghost list: bounded LRU of evicted page hashes, its report, and the tree's backward scan on re-insert."""

import numpy as np
import pytest

from hicache_ref.core.allocator import PageAllocator
from hicache_ref.core.ghost import GhostList
from hicache_ref.core.hashing import hash64, page_hashes
from hicache_ref.core.radix import RadixTree
from hicache_ref.spec import CacheSpec


def tree_spec(page_size, policy="write_through_selective", **switches):
    """The spec a bare tree reads: page size, write policy and the request-path switches."""
    return CacheSpec.of(page_size=page_size, write_policy=policy, **switches)

def test_bound_drops_least_recently_added():
    g = GhostList(3)
    for k in (1, 2, 3):
        g.add(k)
    g.add(1)  # refresh: 2 is now the oldest
    g.add(4)
    assert g.keys() == [3, 1, 4] and 2 not in g and len(g) == 3
    assert g.hit(3) and g.keys() == [1, 4, 3]
    g.add(5)
    assert 1 not in g and g.dropped == 2


def test_report():
    g = GhostList(1000)
    for k in range(1500):
        g.add((k + 1) * 0x9E3779B97F4A7C15 % 2**64)
    r = g.report()
    assert r["entries"] == 1000 and r["bound"] == 1000
    assert 40 < r["bytes_per_entry"] < 400  # measured with tracemalloc; the seed's estimate is ~120 B
    assert r["bytes_at_bound"] == pytest.approx(r["bytes_per_entry"] * 1000, rel=0.01)


def test_bad_capacity():
    with pytest.raises(ValueError, match="capacity"):
        GhostList(0)


def tree_with_ghost(capacity=64):
    dev, host = PageAllocator(64, 2), PageAllocator(64, 2)
    tree = RadixTree(tree_spec(2), ghost=GhostList(capacity), device=dev, host=host)
    return tree, dev


def insert(tree, dev, tokens, rid=None):
    idx = dev.alloc(len(tokens) // 2 * 2)
    r = tree.insert(tokens, idx, request_id=rid)
    dev.free(idx[: r.prefix_len])
    for t in r.backups:
        tree.tiers.complete(t)
    return r


def test_evicted_pages_are_remembered_by_chained_hash():
    tree, dev = tree_with_ghost()
    a = np.arange(12)
    insert(tree, dev, a)
    tree.tiers.evict(64)
    assert tree.match_prefix(a).device_len == 0  # not backed up: dropped
    assert set(tree.ghost.keys()) == {hash64(h) for h in page_hashes(a, 2)}


def test_reinsert_backs_up_exactly_the_longest_proven_prefix():
    tree, dev = tree_with_ghost()
    a = np.arange(12)
    insert(tree, dev, a)
    tree.tiers.evict(64)
    # Same first 3 pages, then new ones: only the 3 proven pages go to L2.
    b = np.concatenate([a[:6], 100 + np.arange(6)])
    r = insert(tree, dev, b)
    assert [t.num_tokens for t in r.backups] == [6]
    tree.tiers.evict(64)
    m = tree.match_prefix(b)
    assert (m.device_len, m.host_len) == (0, 6)


def test_scan_is_backward_and_position_aware():
    tree, dev = tree_with_ghost()
    a = np.arange(12)
    insert(tree, dev, a)
    tree.tiers.evict(64)
    # A request holding a's pages at other positions proves nothing: hashes chain from the root.
    shifted = np.concatenate([[500, 501], a[:10]])
    assert insert(tree, dev, shifted).backups == []
    # The whole request again: the last page is a ghost hit, so everything is backed up.
    r = insert(tree, dev, a)
    assert sum(t.num_tokens for t in r.backups) == 12


def test_off_by_default():
    dev, host = PageAllocator(64, 2), PageAllocator(64, 2)
    tree = RadixTree(tree_spec(2), device=dev, host=host)
    a = np.arange(12)
    insert(tree, dev, a)
    tree.tiers.evict(64)
    assert tree.ghost is None and insert(tree, dev, a).backups == []


def test_ghost_only_adds_to_the_policys_backup():
    tree, dev = tree_with_ghost()
    a = np.arange(8)  # 4 pages, one node
    insert(tree, dev, a, rid="r1")
    # Page 1 of `a` was once evicted from L1 (as if by an earlier life of this prefix).
    tree.ghost.add(hash64(page_hashes(a, 2)[1]))
    # A second request reaches the threshold on a's node (the policy backs up all of it) and
    # adds a page with no ghost hit: the remembered page inside the policy's backup splits nothing.
    b = np.concatenate([a, [900, 901]])
    r = insert(tree, dev, b, rid="r2")
    assert [t.num_tokens for t in r.backups] == [8] and len(r.backups[0].nodes) == 1
    assert tree.ghost.hits == 0
    tree.tiers.evict(64)
    m = tree.match_prefix(b)
    assert (m.device_len, m.host_len) == (0, 8)
