"""Semantics presets by version: sglang-0.5.23's switches, each changing a hand-built case that
fails if the switch were ignored; the presets' values; bad values refused naming the option;
the README's presets table is the one the code renders; the slice's figures against 0.5.23's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hicache_ref.core.allocator import PageAllocator
from hicache_ref.core.radix import RadixTree
from hicache_ref.spec import CacheSpec, SpecError, StorageSpec
from hicache_ref.spec.presets import PRESETS, SWITCHES, preset
from hicache_ref.spec.presets_table import readme_table, table
from hicache_ref.spec.root import SizingWarning

PS = 4
README = Path(__file__).resolve().parents[2] / "hicache_ref" / "README.md"


def _tree(policy="write_through_selective", dev_pages=64, host_pages=64, **switches):
    dev, host = PageAllocator(dev_pages * PS, PS), PageAllocator(host_pages * PS, PS)
    spec = CacheSpec.of(page_size=PS, write_policy=policy, **switches)
    return RadixTree(spec, device=dev, host=host), dev


def _new(tree, dev, tokens, **kw):
    """Insert `tokens` as a request with fresh KV past what the tree holds (the caller's pages freed)."""
    m = tree.match_prefix(tokens)
    fresh = dev.alloc(len(tokens) - m.device_len)
    r = tree.insert(tokens, np.concatenate([m.device_indices, fresh]), **kw)
    return r


def _again(tree, tokens, **kw):
    """Insert `tokens` once more with the tree's own pages (a request's second insert)."""
    return tree.insert(tokens, tree.match_prefix(tokens).device_indices, **kw)


def _complete(tree, result):
    for t in result.backups:
        tree.tiers.complete(t)


# -- hit counting ----------------------------------------------------------------------------

@pytest.mark.parametrize("hit_count, after_a, after_b", [("per_request_insert", 1, 2), ("per_insert", 2, 3)])
def test_one_request_inserted_twice_counts_once(hit_count, after_a, after_b):
    # upstream's own check: request A inserted (unfinished, then finished) keeps hit count 1,
    # a second request B makes it 2; the seed's per_insert counts A twice.
    tree, dev = _tree(hit_count=hit_count)
    x = np.arange(8)
    _new(tree, dev, x, request_id="A", finished=False)
    r = _again(tree, x, request_id="A")
    assert r.last_node.hit_count == after_a
    assert (r.backups != []) == (after_a >= 2)  # selective backs up at 2 hits
    r = _new(tree, dev, x, request_id="B")
    assert r.last_node.hit_count == after_b


@pytest.mark.parametrize("hit_count, backed_up", [("per_request_insert", False), ("per_request", True)])
def test_only_nodes_counted_by_the_insert_queue_a_backup(hit_count, backed_up):
    # Host of 2 pages. Y (2 pages) reaches 2 hits and fills L2; X (2 pages) reaches 2 hits with
    # A's unfinished insert, but its backup finds no room (Y is still in L1). Y then leaves L1
    # (its L2 copy becomes evictable). A's finished insert of X counts nothing: per_request still
    # backs up the due X, 0.5.23 backs up only from a hit increment, so X stays unbacked.
    tree, dev = _tree(host_pages=2, hit_count=hit_count)
    y, x = np.arange(100, 108), np.arange(8)
    _new(tree, dev, y, request_id="r1")
    _complete(tree, _new(tree, dev, y, request_id="r2"))
    _new(tree, dev, x, request_id="B")
    r = _new(tree, dev, x, request_id="A", finished=False)
    node = r.last_node
    assert node.hit_count == 2 and node.host is None and r.backups == []
    tree.tiers.evict(8)  # Y, the older leaf, leaves L1 and keeps its L2 copy
    assert node.dev is not None
    r = _again(tree, x, request_id="A")
    assert node.hit_count == 2 and (node.host is not None) == backed_up and (r.backups != []) == backed_up


@pytest.mark.parametrize("hit_count, count", [("per_request_insert", 2), ("per_request", 1)])
def test_a_host_only_node_readopted_by_an_insert_counts_under_0_5_23(hit_count, count):
    tree, dev = _tree("write_through", hit_count=hit_count)
    _complete(tree, _new(tree, dev, np.arange(8)))
    r = _new(tree, dev, np.arange(16))
    _complete(tree, r)
    child = r.last_node
    tree.lock(child.parent)
    tree.tiers.evict(4)  # the child leaves L1, its L2 copy stays
    tree.unlock(child.parent)
    assert child.dev is None and child.hit_count == 1
    idx = np.concatenate([tree.match_prefix(np.arange(8)).device_indices, dev.alloc(8)])
    tree.insert(np.arange(16), idx)  # recomputed, not loaded: the insert takes the child back
    assert child.dev is not None and child.hit_count == count


# -- backups -----------------------------------------------------------------------------------

@pytest.mark.parametrize("alloc, backed", [("per_node", [True, False]), ("whole_chain", [False, False])])
def test_a_backup_chain_takes_host_slots_node_by_node_under_0_5_23(alloc, backed):
    # P (1 page) then Q (2 pages) both reach 2 hits in B's insert: a chain of 3 pages, L2 holds 2.
    tree, dev = _tree(host_pages=2, hit_count="per_request_insert", backup_scope="path", backup_alloc=alloc)
    p, pq = np.arange(4), np.arange(12)
    _new(tree, dev, p, request_id="A", finished=False)
    _new(tree, dev, pq, request_id="A")
    r = _new(tree, dev, pq, request_id="B")
    q = r.last_node
    assert (q.parent.hit_count, q.hit_count) == (2, 2)
    assert [x.host is not None for x in (q.parent, q)] == backed
    assert sum(t.num_tokens for t in r.backups) == (4 if alloc == "per_node" else 0)


@pytest.mark.parametrize("reclaim, a_host, b_kept", [("duplicates_first", False, True), ("leaves", True, False)])
def test_write_back_reclaims_host_duplicates_before_host_leaves(reclaim, a_host, b_kept):
    # write_back, L2 of 2 pages: A and B written back on eviction (both host-only), A loaded back
    # (now in L1 and L2). Asking L2 for a page frees A's L2 copy first under 0.5.23, B otherwise.
    tree, dev = _tree("write_back", host_pages=2, host_reclaim=reclaim)
    a, b = np.arange(4), np.arange(100, 104)
    na, nb = _new(tree, dev, a).last_node, _new(tree, dev, b).last_node
    tree.tiers.evict(8)
    assert na.dev is None and nb.dev is None and na.host is not None and nb.host is not None
    tree.tiers.complete(tree.tiers.load_back(tree.match_pages(a)))
    assert na.dev is not None and na.host is not None
    assert tree.tiers.evict_host(PS).evicted_tokens == PS
    assert (na.host is not None, nb.parent is not None) == (a_host, b_kept)
    assert na.dev is not None  # the reclaimed node stays in L1


def _last_hit(size, last):
    # Page 64, L1 2,048 tokens (32 pages), no L2: r0 [1] 8 pages, r1 [2] 8 pages, r2 [3] 448
    # tokens = 7 pages: 23 used, 9 free. r3 [4, 5] 576 tokens = 9 pages fits exactly: shortfall
    # evicts nothing; 0.5.23 asks for its 576 tokens plus a page, 64 more than free: r0's node
    # (least recently used) goes; the seed's whole asks for all 640: r0's and r1's go.
    from hicache_ref.sim.run.serial_replay import replay
    from hicache_ref.sim.trace.reader import TraceRequest

    trace = [TraceRequest(0.0, n, 1, ids) for ids, n in (((1,), 512), ((2,), 512), ((3,), 448), ((4, 5), 576),
                                                          ((last,), 512))]
    spec = CacheSpec.of(layers=2, kv_dim=8, l1_tokens=2048, l2_tokens=0, evict_size=size)
    return replay(spec, trace)["l1_hit_tokens"]


@pytest.mark.parametrize("size, r0, r1", [("shortfall", 512, 512), ("demand_shortfall", 0, 512), ("whole", 0, 0)])
def test_an_extend_evicts_what_its_tokens_plus_a_page_lack_under_0_5_23(size, r0, r1):
    assert (_last_hit(size, 1), _last_hit(size, 2)) == (r0, r1)


def _last_hit_page1(size, last):
    # Pages of 1 token, L1 2,048: r0 [1] 512, r1 [2] 512, r2 [3] 448: 576 free. r3 [4, 5] 576 tokens
    # fits exactly: 0.5.23's token allocator asks for its tokens alone (alloc_token_slots), so
    # nothing is evicted and r0 still hits; with a page more (the paged rule) r0's node would go.
    from hicache_ref.sim.run.serial_replay import replay
    from hicache_ref.sim.trace.reader import TraceRequest

    trace = [TraceRequest(0.0, n, 1, ids) for ids, n in (((1,), 512), ((2,), 512), ((3,), 448), ((4, 5), 576),
                                                          ((last,), 512))]
    spec = CacheSpec.of(layers=2, kv_dim=8, l1_tokens=2048, l2_tokens=0, evict_size=size, page_size=1)
    return replay(spec, trace)["l1_hit_tokens"]


@pytest.mark.parametrize("size, r0", [("shortfall", 512), ("demand_shortfall", 512), ("whole", 0)])
def test_a_token_extend_evicts_what_its_tokens_alone_lack_under_0_5_23(size, r0):
    assert _last_hit_page1(size, 1) == r0


# -- the presets and the spec's resolution --------------------------------------------------

def test_preset_values():
    assert set(PRESETS) == {"reference", "seed", "sglang-0.5.23"}
    assert preset("sglang-0.5.23") == dict(
        hit_count="per_request_insert", backup_scope="path", backup_alloc="per_node", evict_size="demand_shortfall",
        host_reclaim="duplicates_first", load_back_threshold=10, free_list="lifo", host_free_list="upstream_host",
        host_layout="page_first", io_backend="kernel", io_resolution="sglang", host_sizing="warn",
        prefetch_policy="timeout", prefetch_timeout_start="first_blocked_poll", prefetch_limit_rule="decline",
        prefetch_anchor="backed_up")
    assert preset("sglang-0.5.23", pd_disagg=True)["free_list"] == "upstream_l1_sorted"
    seed = preset("seed")  # the former `upstream` preset, unchanged
    assert {k: seed[k] for k in ("hit_count", "backup_scope", "evict_size", "load_back_threshold", "free_list",
                                 "host_free_list", "io_backend")} == dict(
        hit_count="per_insert", backup_scope="node", evict_size="whole", load_back_threshold=10,
        free_list="upstream_l1", host_free_list="upstream_host", io_backend="kernel")
    assert CacheSpec() == CacheSpec.preset("reference")  # the default preset


def test_the_spec_resolves_the_preset_with_pd_and_lists_overrides():
    sg = CacheSpec.preset("sglang-0.5.23")
    assert (sg.tiers.free_list, sg.tiers.host_layout, sg.effective_host_layout) == ("lifo", "page_first", "page_first")
    pd = CacheSpec.preset("sglang-0.5.23", pd_disagg=True)
    assert pd.tiers.free_list == "upstream_l1_sorted" and pd.semantics.overrides == ()
    assert CacheSpec.preset("sglang-0.5.23", host_layout="layer_first").semantics.overrides == ("host_layout",)
    assert sg.storage.prefetch_policy is None  # the prefetch switches apply with an L3 only
    l3 = CacheSpec.preset("sglang-0.5.23", l3="memory:", materialize=True, l2_tokens=4096, page_size=PS)
    assert (l3.storage.prefetch_policy, l3.storage.prefetch_timeout_start, l3.storage.prefetch_limit_rule,
            l3.storage.prefetch_anchor) == ("timeout", "first_blocked_poll", "decline", "backed_up")
    assert CacheSpec.of(l3="memory:", materialize=True, l2_tokens=4096).storage.prefetch_policy == "wait_complete"


def test_io_resolution_as_sglang_0_5_23():
    mha = dict(attention="mha", heads=2, kv_dim=4, layers=1)
    sg = CacheSpec.preset("sglang-0.5.23", host_layout="page_first_direct")
    assert sg.tiers.io_backend == "direct"  # kernel does not move page_first_direct: direct
    assert CacheSpec.preset("reference", host_layout="page_first_direct", io_backend="kernel").tiers.io_backend == "kernel"
    assert CacheSpec.preset("sglang-0.5.23", host_layout="page_first", io_backend="direct").effective_host_layout \
        == "page_first_direct"
    with pytest.raises(SpecError, match="^--io-backend: direct does not move the page_head host layout"):
        CacheSpec.preset("sglang-0.5.23", host_layout="page_head", io_backend="direct", **mha)
    assert CacheSpec.preset("reference", host_layout="page_head", io_backend="direct", **mha).tiers.io_backend == "direct"


def test_host_no_larger_than_device_warns_under_0_5_23_and_is_refused_otherwise():
    with pytest.raises(SpecError, match="^--hicache-ratio: host pool of .* is not larger than the device pool"):
        CacheSpec.of(l1_tokens=64_000, hicache_ratio=0.5)
    with pytest.warns(SizingWarning, match="^--hicache-ratio: host pool"):
        spec = CacheSpec.preset("sglang-0.5.23", l1_tokens=64_000, hicache_ratio=0.5)
    assert spec.tiers.l2_tokens == (32_000 // 64 + 1) * 64
    assert spec.host_sizing["host_larger_check"].startswith("warned: ")


@pytest.mark.parametrize("field, option", [
    ("hit_count", "--hit-count"), ("backup_alloc", "--backup-alloc"), ("host_reclaim", "--host-reclaim"),
    ("io_resolution", "--io-resolution"), ("host_sizing", "--host-sizing"), ("host_layout", "--host-layout")])
def test_a_bad_switch_value_is_refused_naming_its_option(field, option):
    with pytest.raises(SpecError, match=f"^{option}: 'nope' is not one of"):
        CacheSpec.of(**{field: "nope"})


@pytest.mark.parametrize("field, option", [("prefetch_timeout_start", "--prefetch-timeout-start"),
                                           ("prefetch_limit_rule", "--prefetch-limit-rule")])
def test_a_bad_prefetch_switch_is_refused_naming_its_option(field, option):
    with pytest.raises(SpecError, match=f"^{option}: 'nope' is not one of"):
        StorageSpec(l3="memory:", **{field: "nope"})
    with pytest.raises(SpecError, match=f"^{option}: applies to an L3"):
        StorageSpec(**{field: "issue"})


@pytest.mark.slow  # runs the command or pytest in a child process
def test_cli_refuses_a_bad_switch_in_one_line():
    run = subprocess.run([sys.executable, "-m", "conformance.cli.main", "replay", "--host-reclaim", "nope"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.startswith("hicache: --host-reclaim: ")
    assert len(run.stderr.strip().splitlines()) == 1


# -- the README's table -----------------------------------------------------------------------

def test_readme_presets_table_is_the_rendered_one():
    assert readme_table(README.read_text(encoding="utf-8")) == table(), \
        "hicache_ref/README.md's presets table is stale: paste `python -m hicache_ref.spec.presets_table`"


def test_the_table_has_a_row_per_switch_naming_an_upstream_file_and_function():
    rows = table().splitlines()[2:]
    assert len(rows) == len(SWITCHES)
    assert all(".py: " in r for r in rows)


# -- the slice, against SGLang 0.5.23's own figures ------------------------------------------------

@pytest.mark.slow
def test_the_conversation_slice_with_pd_gives_0_5_23s_hit_rate_and_d2h():
    # SGLang 0.5.23 itself, run on this slice with PD disaggregation, gives hit rate 0.1210 and
    # 78.63 GiB D2H (the seed's per_insert gives 0.2524 and 1,711.73 GiB).
    from hicache_ref.sim.run.replay_dispatch import run_replay
    from hicache_ref.sim.trace.reader import find_trace

    spec = CacheSpec.preset("sglang-0.5.23", l1_tokens=2_000_000, l2_tokens=8_000_000, pd_disagg=True)
    fig = run_replay(spec, find_trace(), 2000)
    assert round(fig["hit_rate"], 4) == 0.1210
    assert round(fig["d2h_bytes"] / 2**30, 2) == 78.63
