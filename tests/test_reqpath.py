"""Request-path semantics, upstream vs the reference: hit counting per insert or per request,
PD-disaggregated double inserts, on workloads small enough to work out by hand."""

import contextlib
import io
import json

import numpy as np
import pytest

from conformance.cli.main import main as cli_main
from hicache_ref.allocator import PageAllocator
from hicache_ref.radix import RadixTree
from hicache_ref.replay import replay
from hicache_ref.spec import CacheSpec
from hicache_ref.trace import TraceRequest

SMALL = dict(layers=2, kv_dim=8)  # bytes only; hits and tokens moved do not depend on it
PS = 4


def _req(ids, n):
    return TraceRequest(0.0, n, 1, tuple(ids))


# Three requests of 512-token blocks (page 64: 8 pages a block), unlimited tiers:
#   r0 = [1, 2]   r1 = [1, 3]   r2 = [4]
TRACE = [_req([1, 2], 1024), _req([1, 3], 1024), _req([4], 512)]


def _d2h(**kw) -> int:
    return replay(CacheSpec(**SMALL, **kw), TRACE)["d2h_tokens"]


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
    a = replay(CacheSpec(**SMALL), TRACE)
    b = replay(CacheSpec(**SMALL, hit_count="per_insert", pd_disagg=True), TRACE)
    # r1 hits [1] (512 tokens) in L1 either way; the second insert adds no hit.
    assert a["l1_hit_tokens"] == b["l1_hit_tokens"] == 512
    assert (b["hit_count"], b["pd_disagg"]) == ("per_insert", True)
    assert (a["hit_count"], a["pd_disagg"]) == ("per_request", False)


def test_spec_refuses_bad_switches_naming_the_field():
    with pytest.raises(ValueError, match="^hit_count: 'per_turn' is not one of per_insert, per_request"):
        CacheSpec(hit_count="per_turn")
    with pytest.raises(ValueError, match="^pd_disagg: expected True or False"):
        CacheSpec(pd_disagg=1)


# -- the tree: chunked inserts and write_back under per_insert ---------------------------

def _tree(policy, hit_count):
    dev, host = PageAllocator(64, PS), PageAllocator(64, PS)
    return RadixTree(PS, policy, device=dev, host=host, hit_count=hit_count), dev


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
    assert tree.num_nodes == 0


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
