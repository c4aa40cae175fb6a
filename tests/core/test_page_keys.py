"""Page spellings of the radix tree (hicache_ref.core.page_keys): "runs" gives the same tree as "tokens"."""

from __future__ import annotations

import numpy as np
import pytest

from hicache_ref.core.block_tokens import TraceTokens, request_tokens, trace_tokens
from hicache_ref.core.hashing import page_hashes
from hicache_ref.core.page_keys import RunKeys, TokenKeys, make_page_keys
from hicache_ref.core.radix import RadixTree
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.trace.synth import synthesize
from hicache_ref.spec import CacheSpec


def tree_spec(page_size, policy="write_through_selective", **switches):
    """The spec a bare tree reads: page size, write policy and the request-path switches."""
    return CacheSpec.of(page_size=page_size, write_policy=policy, **switches)

@pytest.mark.parametrize("ps", [1, 16, 64, 512])
def test_a_trace_request_spelled_by_runs_decodes_to_its_token_ids(ps):
    t, arr = TraceTokens((3, 7, 9), 1100), request_tokens((3, 7, 9), 1100)
    assert len(t) == 1100 and (np.asarray(t) == arr).all()
    runs = RunKeys(ps)
    key = runs.encode(t)
    assert len(key) == 1100 // ps * 4  # 4 bytes per whole page, the partial page left out
    assert key == runs.encode(arr)  # from hash ids or from the token array: the same spelling
    assert runs.token_bytes(key) == TokenKeys(ps).encode(arr) == arr[: 1100 // ps * ps].astype("<u4").tobytes()


def test_trace_tokens_slice_from_the_start_without_building_the_array():
    t = TraceTokens((5, 6), 700)
    head = t[:600]
    assert isinstance(head, TraceTokens) and len(head) == 600 and head._array is None
    assert len(t[:5000]) == 700
    assert (t[100:110] == request_tokens((5, 6), 700)[100:110]).all()  # other slices: the array
    assert TraceTokens((5,), 100).run_keys(48) is None  # 48 does not divide 512: pages straddle blocks


def test_runs_refuses_pages_that_are_not_runs_and_names_the_page():
    with pytest.raises(ValueError, match=r"tokens: page 1 is not a run .* page_keys='tokens'"):
        RunKeys(4).encode(np.array([8, 9, 10, 11, 1, 2, 3, 5], dtype=np.uint32))
    with pytest.raises(ValueError, match="page_keys: 'bytes' is not one of tokens, runs"):
        make_page_keys("bytes", 4)
    with pytest.raises(ValueError, match="page_keys"):
        RadixTree(tree_spec(4), page_keys="bytes")


def _cache_run(page_keys: str, reqs, **kw):
    """Per-request results, final tree (decoded keys, pages) and page hashes of a cache whose tree spells pages so."""
    spec = CacheSpec.of(page_size=16, layers=2, kv_dim=8, **kw)
    backend, own = spec.open_backend()
    cache = spec.build(backend, 0, page_keys=page_keys)
    try:
        results = []
        for r in reqs:
            tokens = TraceTokens(r.hash_ids, r.input_length) if page_keys == "runs" else \
                request_tokens(r.hash_ids, r.input_length)
            results.append(cache.request(tokens))
        cache.settle()
        tree = cache.tree
        nodes = [(tree.keys.token_bytes(x.key), None if x.dev is None else x.dev.tolist(),
                  None if x.host is None else x.host.tolist(), x.hit_count) for x in tree.iter_nodes()]
        hashes = [tree.node_hashes(x) for x in tree.iter_nodes()]
        ghost = tree.ghost.report() if tree.ghost is not None else None
    finally:
        cache.close()
        if own:
            backend.close()
    return results, nodes, hashes, ghost


@pytest.mark.parametrize("kw", [dict(l1_tokens=4096, l2_tokens=16384),
                                dict(l1_tokens=4096, l2_tokens=16384, write_policy="write_back", ghost=True),
                                dict(l1_tokens=2048, l2_tokens=8192, semantics="sglang-0.5.23")])
def test_runs_and_tokens_make_the_same_decisions_and_the_same_page_hashes(kw):
    reqs = synthesize(120, 100, 1500, 0.7, sessions=5, seed=3)
    a, b = _cache_run("tokens", reqs, **kw), _cache_run("runs", reqs, **kw)
    assert a[0] == b[0]  # every request: hits per tier, cached, truncated
    assert a[1] == b[1] and len(a[1]) >= 3  # the same nodes, keys, pages and hit counts
    assert a[2] == b[2]  # storage keys and ghost entries come from these
    assert a[3] == b[3]
    first = a[1][0][0]
    assert a[2][0] == page_hashes(np.frombuffer(first, dtype="<u4"), 16)  # over token ids, as upstream's keys


def test_replay_spells_trace_pages_by_runs_only_where_pages_are_runs():
    reqs = synthesize(60, 100, 1200, 0.6, sessions=3, seed=4)
    for ps in (16, 48):  # 48: pages straddle hash blocks, the tree keeps token keys
        fig = replay(CacheSpec.of(page_size=ps, l1_tokens=4800, l2_tokens=9600, layers=2, kv_dim=8), reqs)
        assert fig["l1_hit_tokens"] + fig["l2_hit_tokens"] > 0


def test_trace_tokens_of_a_whole_trace_carry_the_keys_each_request_would_make():
    reqs = synthesize(30, 100, 3000, 0.5, sessions=3, seed=6)
    for ps in (16, 64, 48):
        for t, r in zip(trace_tokens(reqs, ps), reqs, strict=True):
            alone = TraceTokens(r.hash_ids, r.input_length)
            assert t.run_keys(ps) == alone.run_keys(ps) and t[: r.input_length // 2].run_keys(ps) == \
                alone[: r.input_length // 2].run_keys(ps)
            assert (np.asarray(t) == request_tokens(r.hash_ids, r.input_length)).all()


def test_replay_freezes_only_what_it_found_and_restores_the_collector():
    """frozen_heap: objects made before the replay are frozen for it and unfrozen after; a caller's
    own freeze or a disabled collector is left exactly as it was."""
    import gc

    from hicache_ref.sim.run.serial_replay import frozen_heap

    reqs = synthesize(20, 100, 600, 0.5, sessions=2, seed=1)
    spec = CacheSpec.of(page_size=16, l1_tokens=4096, l2_tokens=8192, layers=2, kv_dim=8)
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() > 0  # what existed is out of the collector's way
        inner = gc.get_freeze_count()
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        replay(spec, reqs)
        # the caller's freeze is not undone (a frozen object the replay releases by refcount leaves it)
        assert 0.9 * mine <= gc.get_freeze_count() <= mine
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        replay(spec, reqs)
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()
    assert inner > 0
