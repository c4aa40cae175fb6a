"""One prefill's tree steps (hicache_ref.core.prefill): the host tail loaded back before new pages are taken, the pages needed and kept (the live partial page freed), a refused load recomputed, a short L1 truncating the cached prefix, the pages in token order."""

import numpy as np

from hicache_ref.core.allocator import PageAllocator
from hicache_ref.core.prefill import Prefill
from hicache_ref.core.radix import RadixTree
from hicache_ref.spec import CacheSpec

PS = 2


def make_tree(dev_tokens=64, host_tokens=64):
    spec = CacheSpec.of(page_size=PS, write_policy="write_through")
    return RadixTree(spec, device=PageAllocator(dev_tokens, PS), host=PageAllocator(host_tokens, PS))


def serve(tree, tokens, **admit_kw):
    """One request: match, admit, insert, release; every copy landed at once. Returns the Prefill."""
    fill = Prefill(tree, tree.match_pages(tokens), len(tokens))
    fill.admit(**admit_kw)
    r = fill.insert(np.asarray(tokens))
    if fill.load is not None:
        tree.tiers.complete(fill.load)
    for t in (r.backups if r is not None else []):
        tree.tiers.complete(t)
    fill.release()
    return fill


def test_a_new_request_takes_its_pages_and_keeps_only_whole_ones():
    tree = make_tree()
    fill = serve(tree, list(range(9)))  # 4 whole pages and a partial one
    assert (fill.prefix, fill.need_pages, len(fill.new_pages), fill.cached_len, fill.kept) == (0, 5, 5, 8, 4)
    assert not fill.truncated and fill.load is None
    assert tree.device.used_tokens == 8 == tree.tiers.device_pages * PS  # the partial page went back


def test_an_l1_hit_is_the_prefix_and_only_the_rest_is_taken():
    tree = make_tree()
    first = serve(tree, list(range(8)))
    fill = serve(tree, list(range(12)))
    assert (fill.l1, fill.prefix, fill.need_pages, fill.kept) == (8, 8, 2, 2)
    assert fill.pages[:4].tolist() == first.pages.tolist()  # the hit's pages first, in token order
    assert tree.match_prefix(list(range(12))).device_indices.tolist() == \
        np.concatenate([np.arange(p * PS, p * PS + PS) for p in fill.pages]).tolist()


def test_the_host_tail_is_loaded_back_before_new_pages_are_taken():
    tree = make_tree()
    serve(tree, list(range(8)))
    tree.tiers.evict(8)  # host-only now
    seen = []
    fill = Prefill(tree, tree.match_pages(list(range(12))), 12)
    fill.admit(on_load=lambda copy: seen.append((copy.kind, len(copy.device_pages), len(fill.new_pages))))
    assert seen == [("load", 4, 0)]  # handed over before the allocation
    assert (fill.prefix, fill.unloaded, fill.need_pages, len(fill.new_pages)) == (8, 0, 2, 2)
    assert fill.pages[:4].tolist() == fill.loaded.tolist()


def test_a_load_under_the_threshold_is_recomputed():
    tree = make_tree()
    serve(tree, list(range(8)))
    tree.tiers.evict(8)
    fill = serve(tree, list(range(12)), min_load_tokens=9)
    assert fill.load is None and (fill.unloaded, fill.prefix, fill.need_pages, fill.kept) == (8, 0, 6, 6)
    m = tree.match_prefix(list(range(12)))
    assert m.device_len == 12  # recomputed into L1


def test_a_short_l1_truncates_the_cached_prefix():
    tree = make_tree(dev_tokens=8)
    held = tree.device.alloc(4)  # a caller's: not the tree's to evict
    fill = serve(tree, list(range(10)))
    assert fill.truncated and (fill.need_pages, len(fill.new_pages), fill.cached_len, fill.kept) == (5, 2, 4, 2)
    assert tree.match_prefix(list(range(10))).device_len == 4
    tree.device.free(held)


def test_nothing_cached_inserts_nothing():
    tree = make_tree(dev_tokens=4)
    held = tree.device.alloc(4)
    fill = Prefill(tree, tree.match_pages([1, 2, 3]), 3)
    fill.admit()
    assert fill.cached_len == 0 and fill.insert(np.array([1, 2, 3])) is None
    fill.release()
    assert tree.tiers.num_nodes == 0
    tree.device.free(held)


def test_the_pages_are_the_hit_then_the_loaded_tail_then_the_new_ones():
    tree = make_tree()
    serve(tree, list(range(8)))
    serve(tree, list(range(4)))  # split: [0..3] and its child [4..7]
    tree.match_prefix(list(range(4)))  # [0..3] touched: the child is the LRU leaf
    tree.tiers.evict(4)
    m = tree.match_pages(list(range(12)))
    hit = m.device_pages.copy()
    fill = serve(tree, list(range(12)))
    assert len(hit) == 2 and len(fill.loaded) == 2 and fill.kept == 2
    assert fill.pages.tolist() == [*hit.tolist(), *fill.loaded.tolist(), *fill.new_pages[:2].tolist()]
    assert tree.match_pages(list(range(12))).device_pages.tolist() == fill.pages.tolist()
