"""Request-path semantics, SGLang's (the seed's, 0.5.23's) vs the reference: hit counting per insert or per request,
PD-disaggregated double inserts, on workloads small enough to work out by hand."""

import contextlib
import io
import json

import numpy as np
import pytest

from conformance.cli.main import main as cli_main
from hicache_ref.core.allocator import PageAllocator
from hicache_ref.core.radix import RadixTree
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.spec import CacheSpec

SMALL = dict(layers=2, kv_dim=8)  # bytes only; hits and tokens moved do not depend on it
PS = 4



def tree_spec(page_size, policy="write_through_selective", **switches):
    """The spec a bare tree reads: page size, write policy and the request-path switches."""
    return CacheSpec.of(page_size=page_size, write_policy=policy, **switches)

def _req(ids, n):
    return TraceRequest(0.0, n, 1, tuple(ids))


# Three requests of 512-token blocks (page 64: 8 pages a block), unlimited tiers:
#   r0 = [1, 2]   r1 = [1, 3]   r2 = [4]
TRACE = [_req([1, 2], 1024), _req([1, 3], 1024), _req([4], 512)]


def _d2h(**kw) -> int:
    return replay(CacheSpec.of(**SMALL, **kw), TRACE)["d2h_tokens"]


@pytest.mark.slow
def test_selective_single_insert_backs_up_only_what_two_requests_shared():
    # r0 inserts node [1,2]: hit 1. r1 splits it: [1] keeps the hit and gets one more (2:
    # backed up, 512 tokens); [3] is new (1). r2: [4] new (1). Either hit count: 512.
    for hc in ("per_insert", "per_request"):
        assert _d2h(hit_count=hc) == 512


def test_pd_disagg_per_insert_degrades_selective_into_write_through():
    # Each request is inserted twice. r0: [1,2] 1 then 2 -> backed up (1024). r1: [1] was
    # already backed up; [3] 1 then 2 -> 512. r2: [4] 1 then 2 -> 512. Total 2048, which is
    # every distinct token: what write_through backs up (1024 + 512 + 512).
    assert _d2h(hit_count="per_insert", pd_disagg=True) == 2048
    assert _d2h(write_policy="write_through") == 2048
    assert _d2h(write_policy="write_through", pd_disagg=True) == 2048


def test_pd_disagg_per_request_backs_up_only_what_distinct_requests_reused():
    # The finished insert finds every page already counted by the same request: as without
    # PD, only [1] (reused by r1) reaches 2 hits.
    assert _d2h(hit_count="per_request", pd_disagg=True) == 512


def test_pd_disagg_keeps_hits_and_reports_the_switches():
    a = replay(CacheSpec.of(**SMALL), TRACE)
    b = replay(CacheSpec.of(**SMALL, hit_count="per_insert", pd_disagg=True), TRACE)
    # r1 hits [1] (512 tokens) in L1 either way; the second insert adds no hit.
    assert a["l1_hit_tokens"] == b["l1_hit_tokens"] == 512
    assert (b["hit_count"], b["pd_disagg"]) == ("per_insert", True)
    assert (a["hit_count"], a["pd_disagg"]) == ("per_request", False)


def test_spec_refuses_bad_switches_naming_the_field():
    with pytest.raises(ValueError, match="^--hit-count: 'per_turn' is not one of per_insert, per_request"):
        CacheSpec.of(hit_count="per_turn")
    with pytest.raises(ValueError, match="^--pd-disagg: expected True or False"):
        CacheSpec.of(pd_disagg=1)


# -- the tree: chunked inserts and write_back under per_insert ---------------------------

def _tree(policy, hit_count):
    dev, host = PageAllocator(64, PS), PageAllocator(64, PS)
    return RadixTree(tree_spec(PS, policy, hit_count=hit_count), device=dev, host=host), dev


def _insert(tree, dev, tokens, **kw):
    idx = dev.alloc(len(tokens) // PS * PS)
    r = tree.insert(tokens, idx, **kw)
    dev.free(idx[: r.prefix_len])
    return r


def test_per_insert_chunked_inserts_count_no_hit_and_queue_no_backup():
    tree, dev = _tree("write_through", "per_insert")
    chunk = np.arange(8)
    r = _insert(tree, dev, chunk, chunked=True)  # write_through would back up at 1 hit: none counted
    assert r.backups == [] and r.last_node.hit_count == 0
    r = _insert(tree, dev, np.arange(12))  # the whole prompt, unchunked: [0..8) 0+1, [8..12) new 1
    assert [x.hit_count for x in (r.last_node.parent, r.last_node)] == [1, 1]
    assert sum(t.num_tokens for t in r.backups) == 12


def test_per_request_chunked_inserts_count_once_per_request():
    tree, dev = _tree("write_through_selective", "per_request")
    r = _insert(tree, dev, np.arange(8), request_id="a", finished=False, chunked=True)
    assert r.last_node.hit_count == 1  # the reference counts a chunk like any first insert
    r = _insert(tree, dev, np.arange(12), request_id="a")  # same request: [0..8) not counted again
    assert [x.hit_count for x in (r.last_node.parent, r.last_node)] == [1, 1] and r.backups == []


def test_per_insert_write_back_accumulates_no_hits():
    tree, dev = _tree("write_back", "per_insert")
    for _ in range(3):
        r = _insert(tree, dev, np.arange(8))
    assert r.last_node.hit_count == 0 and r.backups == []
    tree, dev = _tree("write_back", "per_request")
    for _ in range(3):
        r = _insert(tree, dev, np.arange(8))
    assert r.last_node.hit_count == 3  # counted, never acted on


def test_insert_refuses_a_non_bool_chunked():
    tree, dev = _tree("write_through", "per_insert")
    with pytest.raises(ValueError, match="^chunked: expected True or False"):
        tree.insert(np.arange(4), dev.alloc(4), chunked="yes")
    assert tree.tiers.num_nodes == 0


# -- the CLI ----------------------------------------------------------------------------

def _cli(*args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli_main(["replay", *args])
    return rc, out.getvalue()


def _trace_file(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": r.input_length, "output_length": 1,
                                     "hash_ids": list(r.hash_ids)}) + "\n" for i, r in enumerate(TRACE)))
    return str(p)


def test_cli_hit_count_and_pd_disagg(tmp_path):
    t = _trace_file(tmp_path)
    geo = ["--layers", "2", "--kv-dim", "8", "--json", "--quiet", "--trace", t]
    rc, out = _cli(*geo, "--hit-count", "per_insert", "--pd-disagg")
    fig = json.loads(out)
    assert rc == 0 and fig["d2h_tokens"] == 2048 and fig["hit_count"] == "per_insert" and fig["pd_disagg"] is True
    rc, out = _cli(*geo, "--pd-disagg")
    assert json.loads(out)["d2h_tokens"] == 512  # the default counts per request


# -- load_back: threshold and quota, all or nothing ---------------------------------------

def _host_only_child():
    """Parent [0..8) in L1 (unlocked), child [8..16) only in L2: 8 tokens to load back."""
    tree, dev = _tree("write_through", "per_request")
    r = _insert(tree, dev, np.arange(8))
    for t in r.backups:
        tree.tiers.complete(t)
    r = _insert(tree, dev, np.arange(16))
    for t in r.backups:
        tree.tiers.complete(t)
    child = r.last_node
    tree.lock(child.parent)  # keep the parent in L1 while the child is evicted
    tree.tiers.evict(4)
    tree.unlock(child.parent)
    assert child.dev is None and child.host is not None and child.parent.dev is not None
    return tree, child


def test_load_back_threshold_refuses_chains_shorter_than_it():
    tree, child = _host_only_child()
    assert tree.tiers.load_back(child, min_tokens=9) is None  # 8 < 9: recompute instead (upstream: len < threshold)
    assert child.dev is None and tree.tiers.device_pages == 2
    t = tree.tiers.load_back(child, min_tokens=8)  # 8 < 8 is false: loaded
    assert t is not None and t.num_tokens == 8 and child.dev is not None


def test_load_back_quota_counts_the_ancestors_its_lock_protects():
    # Upstream refuses when len > mem_quota + delta, delta = -(tokens its inc_lock_ref newly
    # protects). Unlocked parent of 8 tokens: 8 > 15 - 8 refused, 8 > 16 - 8 is false: loaded.
    tree, child = _host_only_child()
    assert tree.tiers.load_back(child, quota=15) is None
    assert tree.tiers.load_back(child, quota=16) is not None


def test_load_back_quota_with_the_parent_already_locked():
    # The caller (HiCache) locks the matched device prefix first: delta 0, so quota 8 admits 8.
    tree, child = _host_only_child()
    tree.lock(child.parent)
    assert tree.tiers.load_back(child, quota=7) is None
    assert tree.tiers.load_back(child, quota=8) is not None


def _l1_trace_replay(**kw):
    # Page 64, L1 1,024 tokens (16 pages), unlimited L2, write_through:
    #   r0 [1]   (8 pages)  backed up
    #   r1 [2,3] (16 pages) 8 short: evicts r0's node, which stays in L2
    #   r2 [1]   matches 512 host tokens: loaded back, or recomputed under the threshold
    trace = [_req([1], 512), _req([2, 3], 1024), _req([1], 512)]
    return replay(CacheSpec.of(**SMALL, l1_tokens=1024, write_policy="write_through", **kw), trace)


def test_replay_load_back_threshold():
    assert _l1_trace_replay()["l2_hit_tokens"] == 512
    assert _l1_trace_replay(load_back_threshold=512)["l2_hit_tokens"] == 512  # 512 < 512 is false
    f = _l1_trace_replay(load_back_threshold=513)
    assert f["l2_hit_tokens"] == 0 and f["l2_unloaded_tokens"] == 512 and f["h2d_tokens"] == 0
    assert _l1_trace_replay(load_back_quota=511)["l2_unloaded_tokens"] == 512


# -- eviction size when a tier is short ------------------------------------------------

@pytest.mark.parametrize("size,left", [("shortfall", 2), ("whole", 1)])
def test_evict_size(size, left):
    # L1 of 8 pages holds leaves A, B, C (1 page each, oldest first) and D (4 pages): 1 free.
    # Taking 2 pages: shortfall evicts 1 page (A); whole asks for 2 pages: A and B.
    dev, host = PageAllocator(8 * PS, PS), PageAllocator(64 * PS, PS)
    tree = RadixTree(tree_spec(PS, "write_back", evict_size=size), device=dev, host=host)
    for first, n in ((100, 4), (200, 4), (300, 4), (400, 16)):
        _insert(tree, dev, first + np.arange(n))
    assert dev.available_pages == 1
    pages = tree.tiers.take_pages(dev, 2, tree.tiers.evict)
    assert len(pages) == 2
    on_device = sum(x.dev is not None for x in tree.iter_nodes())
    assert on_device == left + 1  # D and what survived of A, B, C


def test_evict_size_whole_counts_the_extra_tokens_asked_for():
    dev, host = PageAllocator(8 * PS, PS), PageAllocator(64 * PS, PS)
    tree = RadixTree(tree_spec(PS, "write_back", evict_size="whole"), device=dev, host=host)  # no backup locks
    for first in (100, 200, 300, 400, 500, 600):
        _insert(tree, dev, first + np.arange(4))
    assert dev.available_pages == 2
    # 2 pages are free, so shortfall would evict nothing; upstream's extend allocation asks
    # for its tokens plus one page (8 + 4 = 12 > 8 free) and evicts 12 tokens: 3 leaves.
    tree.tiers.take_pages(dev, 2, tree.tiers.evict, evict_tokens=12)
    assert sum(x.dev is not None for x in tree.iter_nodes()) == 3


def test_tiers_refuse_an_unknown_evict_size():
    with pytest.raises(ValueError, match="^--evict-size: 'most'"):
        RadixTree(tree_spec(PS, evict_size="most"))
    with pytest.raises(ValueError, match="^--backup-scope: 'tree'"):
        RadixTree(tree_spec(PS, backup_scope="tree"))


# -- the semantics preset ---------------------------------------------------------------

def test_presets_and_explicit_overrides():
    up = CacheSpec.preset("seed", **SMALL)
    assert (up.semantics.hit_count, up.semantics.backup_scope, up.semantics.evict_size,
            up.semantics.load_back_threshold) == ("per_insert", "node", "whole", 10)
    # upstream's device allocator and host pool orders, and its server's default io_backend
    assert (up.tiers.free_list, up.tiers.host_free_list, up.tiers.io_backend) == ("upstream_l1", "upstream_host", "kernel")
    assert up.semantics_config()["semantics_overrides"] == []
    assert CacheSpec.preset("seed", free_list="fifo").semantics_config()["semantics_overrides"] == ["free_list"]
    ref = CacheSpec.preset("reference")
    assert ref == CacheSpec.of()  # the spec's defaults are the reference preset
    mixed = CacheSpec.preset("seed", hit_count="per_request")
    assert mixed.semantics_config()["semantics_overrides"] == ["hit_count"]
    with pytest.raises(ValueError, match="^--semantics: 'sglang' is not one of reference, seed, sglang-0.5.23"):
        CacheSpec.preset("sglang")
    with pytest.raises(ValueError, match="^--semantics: 'sglang'"):
        CacheSpec.of(semantics="sglang")


def test_seed_preset_with_pd_disagg_degrades_selective_on_the_hand_trace():
    # As test_pd_disagg_per_insert...: each request's own second insert backs it up.
    fig = replay(CacheSpec.preset("seed", **SMALL, pd_disagg=True), TRACE)
    assert fig["d2h_tokens"] == 2048 and fig["semantics"] == "seed" and fig["semantics_overrides"] == []
    assert {k: fig[k] for k in ("hit_count", "backup_scope", "evict_size", "load_back_threshold")} == dict(
        hit_count="per_insert", backup_scope="node", evict_size="whole", load_back_threshold=10)


@pytest.mark.slow
def test_cli_semantics_preset_and_override(tmp_path):
    geo = ["--layers", "2", "--kv-dim", "8", "--json", "--quiet", "--trace", _trace_file(tmp_path)]
    rc, out = _cli(*geo, "--semantics", "seed", "--pd-disagg")
    fig = json.loads(out)
    assert rc == 0 and fig["d2h_tokens"] == 2048 and fig["semantics_overrides"] == []
    rc, out = _cli(*geo, "--semantics", "seed", "--pd-disagg", "--hit-count", "per_request")
    fig = json.loads(out)
    assert fig["d2h_tokens"] == 512 and fig["hit_count"] == "per_request" and fig["semantics_overrides"] == ["hit_count"]
    assert (fig["free_list"], fig["host_free_list"], fig["io_backend"]) == ("upstream_l1", "upstream_host", "kernel")
    rc, out = _cli(*geo, "--semantics", "seed", "--io-backend", "direct")
    assert json.loads(out)["semantics_overrides"] == ["io_backend"]
    rc, out = _cli(*geo, "--backup-scope", "path", "--load-back-threshold", "1K")
    fig = json.loads(out)
    assert (fig["backup_scope"], fig["load_back_threshold"], fig["semantics"]) == ("path", 1000, "reference")


@pytest.mark.parametrize("size,hit", [("shortfall", 512), ("whole", 0)])
def test_replay_evict_size_whole_asks_for_the_extend_tokens_plus_a_page(size, hit):
    # Page 64, L1 2,048 tokens (32 pages), no L2:
    #   r0 [1] 8 pages, r1 [2] 8 pages, r2 [3] 448 tokens = 7 pages: 23 used, 9 free.
    #   r3 [4, 5] 576 tokens = 9 pages: fits exactly, so shortfall evicts nothing; upstream
    #      evicts once fewer than 576 + 64 = 640 tokens are free, and asks for 640: r0's
    #      and r1's nodes (512 + 512, least recently used first) go.
    #   r4 [1] hits 512 tokens in L1 only if r0's node survived.
    trace = [_req([1], 512), _req([2], 512), _req([3], 448), _req([4, 5], 576), _req([1], 512)]
    fig = replay(CacheSpec.of(**SMALL, l1_tokens=2048, l2_tokens=0, evict_size=size), trace)
    assert fig["l1_hit_tokens"] == hit
