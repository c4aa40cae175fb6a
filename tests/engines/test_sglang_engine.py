"""The sglang engine (hicache_ref.engines.sglang): NOT RUN with the reason where SGLang is absent;
where it is installed, the reference's figure keys from SGLang's own HiCache on the HAL."""

from __future__ import annotations

import pytest

from conformance.cli.main import main as cli_main
from hicache_ref.engines import ENGINES, EngineNotRun, not_run_reason, replay_with
from hicache_ref.engines.sglang.pin import SEMANTICS_PRESET, SGLANG_VERSION, unavailable_reason
from hicache_ref.sim.trace.reader import find_trace
from hicache_ref.spec import CacheSpec

_WHY = unavailable_reason()


def needs_sglang(test):
    """Run `test` in the SGLang environment's selection (-m needs_sglang, ci/test-sglang.sh), skipped
    with the reason where SGLang is absent."""
    return pytest.mark.needs_sglang(pytest.mark.skipif(_WHY is not None, reason=f"sglang engine: {_WHY}")(test))

SMALL = dict(layers=1, kv_dim=128, l1_tokens=32768, l2_tokens=65536, page_size=64)


def test_engines_are_named_and_bad_names_refused():
    assert {"reference", "sglang"} <= set(ENGINES)
    assert not_run_reason("reference") is None
    with pytest.raises(ValueError, match="engine"):
        not_run_reason("vllm")


@pytest.mark.skipif(_WHY is None, reason="sglang is installed here: the NOT RUN path cannot be seen")
def test_absent_sglang_is_not_run_with_the_reason(capsys):
    assert SGLANG_VERSION in _WHY or "sglang" in _WHY
    with pytest.raises(EngineNotRun, match="engine sglang"):
        replay_with("sglang", CacheSpec.of(**SMALL), find_trace("conversation_trace.jsonl"), 2)
    assert cli_main(["replay", "--engine", "sglang", "--limit", "2"]) == 3
    assert "NOT RUN" in capsys.readouterr().out


@needs_sglang
def test_sglang_engine_reports_the_reference_keys_and_agrees_on_a_small_slice():
    spec = CacheSpec.preset(SEMANTICS_PRESET, write_policy="write_through", **SMALL)
    trace = find_trace("conversation_trace.jsonl")
    ref = replay_with("reference", spec, trace, 20)
    up = replay_with("sglang", spec, trace, 20)
    assert set(up) == set(ref)
    assert up["requests"] == ref["requests"] == 20
    assert up["input_tokens"] == ref["input_tokens"]
    # Both count the same L1 hits and back up the same tokens here (the differential suite
    # compares every case request by request).
    assert (up["l1_hit_tokens"], up["d2h_tokens"]) == (ref["l1_hit_tokens"], ref["d2h_tokens"])
    assert up["d2h_bytes"] == up["d2h_tokens"] * 128 * 2  # the HAL moved them: 1 layer of 128 bf16


@needs_sglang
def test_sglang_engine_refuses_what_it_does_not_run():
    trace = find_trace("conversation_trace.jsonl")
    # 0.5.23 keeps one host pool per rank: the seed's shared host is not an upstream mode.
    with pytest.raises(ValueError, match="^--shared-host: SGLang 0.5.23 keeps a private host pool per rank"):
        replay_with("sglang", CacheSpec.of(tp=2, shared_host=True, **SMALL), trace, 2)
    # --tp with --concurrency runs, as on the reference: one rank's served replay stands for the group
    assert replay_with("sglang", CacheSpec.of(tp=2, concurrency=2, **SMALL), trace, 2)["tp"] == 2
    with pytest.raises(ValueError, match="^--io-backend: SGLang moves the page_head host layout by kernel only"):
        replay_with("sglang", CacheSpec.of(**dict(SMALL, attention="mha", heads=2, kv_dim=64, host_layout="page_head",
                                                  io_backend="direct")), trace, 2)
    # SGLang's copies move 8-byte words: a 6-byte row cannot run there (the reference prices it)
    with pytest.raises(ValueError, match="^--kv-dim: a token's row of a layer .* is 6 bytes"):
        replay_with("sglang", CacheSpec.of(**dict(SMALL, attention="mha", heads=3, kv_dim=1)), trace, 2)


@needs_sglang
def test_sglang_tp_replay_gives_the_references_group_figures():
    """--tp N on upstream's cache: one rank's replay with the group's figures, the reference's keys
    and, per the preset, the reference's values (every rank writes its own host copy)."""
    spec = CacheSpec.preset(SEMANTICS_PRESET, write_policy="write_through", tp=4, **SMALL)
    trace = find_trace("conversation_trace.jsonl")
    ref = replay_with("reference", spec, trace, 20)
    up = replay_with("sglang", spec, trace, 20)
    assert set(up) == set(ref)
    one = replay_with("sglang", spec.replace(tp=None), trace, 20)
    assert up["d2h_bytes"] == one["d2h_bytes"] > 0  # the one rank replayed is a rank as it runs alone
    group = ("tp", "shared_host", "l2_tokens_per_rank", "host_kv_copies", "d2h_writer_ranks",
             "d2h_bytes_all_ranks", "h2d_bytes_all_ranks", "host_pool_bytes_all_ranks",
             "l1_hit_tokens", "l2_hit_tokens", "d2h_tokens")
    assert {k: up[k] for k in group} == {k: ref[k] for k in group}
    assert (up["tp"], up["host_kv_copies"], up["d2h_writer_ranks"]) == (4, 4, 4)
    assert up["d2h_bytes_all_ranks"] == 4 * up["d2h_bytes"]
    assert up["spec"]["tp"]["ranks"] == 4


@needs_sglang
def test_sglang_engine_refuses_pools_this_machine_cannot_hold(monkeypatch):
    # SGLang's pools are real tensors: 96K tokens of 256-byte rows are 24 MiB, over a 16 MiB budget.
    monkeypatch.setenv("HICACHE_MEMORY_BUDGET", "16MiB")
    with pytest.raises(ValueError, match=r"^--l1-tokens: the sglang engine needs ~24\.0 MiB \(SGLang's device and host"):
        replay_with("sglang", CacheSpec.of(**SMALL), find_trace("conversation_trace.jsonl"), 2)


@needs_sglang
@pytest.mark.parametrize("pd", [False, True])
def test_sglang_served_replay_gives_the_references_served_figures(pd):
    # The differential suite compares every case request by request; here the command's path:
    # the same keys, the same schedule and the same hits and tokens moved.
    from conformance.suites.sglang_diff import SERVED_FIGURES

    spec = CacheSpec.preset(SEMANTICS_PRESET, write_policy="write_through", concurrency=4, pd_disagg=pd,
                            l1_tokens=16384, **{k: v for k, v in SMALL.items() if k != "l1_tokens"})
    trace = find_trace("conversation_trace.jsonl")
    ref = replay_with("reference", spec, trace, 30)
    up = replay_with("sglang", spec, trace, 30)
    assert set(up) == set(ref)
    assert up["concurrency"] == 4 and up["pd"] is pd and 1 < up["max_in_flight"] <= 4
    assert up["steps"] > 0 and up["l1_hit_tokens"] > 0 and up["d2h_tokens"] > 0
    assert {k: up[k] for k in SERVED_FIGURES} == {k: ref[k] for k in SERVED_FIGURES}


def test_differential_rows_count_evictions_of_both_tiers():
    # The suite's eviction columns compare something: a tight write_back slice evicts from L1
    # and, writing back into a full L2, from L2, whole pages at a time.
    from conformance.suites import sglang_diff

    requests = sglang_diff.slice_of("synthetic_trace.jsonl", 12)
    spec = sglang_diff.spec_for(requests, 64, "write_back", tight=True, pd=False)
    rows = sglang_diff.reference_rows(spec, requests)
    assert sum(r.evicted for r in rows) > 0 and sum(r.host_evicted for r in rows) > 0
    assert all(r.evicted % 64 == 0 and r.host_evicted % 64 == 0 for r in rows)


@needs_sglang
@pytest.mark.parametrize("attention,layout,io", [
    ("mla", "layer_first", "kernel"), ("mla", "page_first", "kernel"), ("mla", "page_first_direct", "direct"),
    ("mla", "layer_first", "direct"), ("mha", "page_head", "kernel"), ("mha", "page_first", "kernel"),
    ("mha", "layer_first", "direct")])
def test_narrow_rows_give_the_figures_of_the_specs_rows_and_the_references_prices(attention, layout, io):
    """Upstream on one-layer rows, its copies priced at the spec's geometry: every figure but wall
    times equals the run on the spec's own rows, and the copies cost what the reference says."""
    from conformance.suites import sglang_diff
    from hicache_ref.engines.sglang.engine_replay import replay_sglang

    geo = dict(attention="mha", heads=2, layers=3, kv_dim=32) if attention == "mha" else dict(layers=3, kv_dim=192)
    requests = sglang_diff.slice_of("conversation_trace.jsonl", 12)
    spec = sglang_diff.spec_for(requests, 16, "write_back", True, False, host_layout=layout, io_backend=io, **geo)
    full = replay_sglang(spec, requests, rows="full")
    narrow = replay_sglang(spec, requests, rows="narrow")
    walls = {"wall_seconds", "read_seconds", "tokens_per_second"}
    assert full["h2d_bytes"] > 0 and full["d2h_bytes"] > 0  # the slice loads back from L2
    assert narrow["geometry"].pop("engine_rows")["layers"] == 1 and "engine_rows" not in full["geometry"]
    assert {k: v for k, v in narrow.items() if k not in walls} == {k: v for k, v in full.items() if k not in walls}
    ref = replay_with("reference", spec, requests)
    moved = ["d2h_tokens", "h2d_tokens", "d2h_bytes", "h2d_bytes", "registered_bytes"]
    # Elsewhere a page is its own run(s); layer_first merges adjacent slots into one run, and
    # upstream's device slots are not the reference's (its pool keeps page 0 as padding), so its
    # copies merge differently there (99 D2H segments against 57 on this slice): priced per
    # segment (direct) that is another cost; a kernel copy is priced per token and layer.
    if layout != "layer_first":
        moved += ["d2h_segments", "h2d_segments"]
    if (layout, io) != ("layer_first", "direct"):
        moved += ["modeled_d2h_seconds", "modeled_h2d_seconds"]
    assert {k: narrow[k] for k in moved} == {k: ref[k] for k in moved}


@needs_sglang
def test_the_seed_capacities_run_on_narrow_rows_where_the_specs_rows_do_not_fit(monkeypatch):
    from hicache_ref.engines.sglang.engine_replay import replay_sglang

    monkeypatch.setenv("HICACHE_MEMORY_BUDGET", "64MiB")  # 96K tokens of 256-byte rows fit, of 2 KiB ones not
    spec = CacheSpec.preset(SEMANTICS_PRESET, write_policy="write_through", layers=4, kv_dim=256,
                            l1_tokens=32768, l2_tokens=65536, page_size=64)
    fig = replay_sglang(spec, find_trace("conversation_trace.jsonl"), 10)
    rows = fig["geometry"].pop("engine_rows")
    assert rows == dict(fig["geometry"], layers=1, kv_dim=128) and fig["geometry"]["layers"] == 4
    assert fig["d2h_bytes"] == fig["d2h_tokens"] * 4 * 256 * 2 > 0  # priced at the spec's 4 x 256 rows
    with pytest.raises(ValueError, match=r"^--l1-tokens: the sglang engine needs"):
        replay_sglang(spec.replace(l1_tokens=1 << 20, l2_tokens=1 << 20), find_trace("conversation_trace.jsonl"), 2)


@needs_sglang
def test_the_seed_scenario_on_narrow_rows_gives_the_references_0_5_23_figures():
    """The seed scenario's capacities and rows (400K L1, 75 GB of L2 a card at 78 x 576: ~103 GiB
    of pools) run upstream on one-layer rows; served at concurrency 10 with PD, every figure the
    reference's sglang-0.5.23 preset gives is upstream's too, segments and modeled seconds included."""
    from hicache_ref.engines.sglang.engine_replay import replay_sglang
    from hicache_ref.sim.fit.seed_report import seed_requests
    from hicache_ref.sim.run.served_replay import replay_served

    requests = seed_requests()[:300]
    spec = CacheSpec.preset(SEMANTICS_PRESET, l1_tokens=400000, l2_tokens=834624, write_policy="write_through_selective",
                            host_layout="page_first_direct", io_backend="direct", concurrency=10, pd_disagg=True)
    assert spec.geometry.layers == 78 and spec.geometry.kv_dim == 576  # the seed's rows, by default
    ref, up = replay_served(spec, requests), replay_sglang(spec, requests)
    assert up["geometry"]["engine_rows"]["layers"] == 1
    keys = ("hit_rate", "l1_hit_tokens", "l2_hit_tokens", "d2h_tokens", "h2d_tokens", "d2h_bytes", "h2d_bytes",
            "d2h_segments", "h2d_segments", "modeled_d2h_seconds", "modeled_h2d_seconds", "steps", "max_in_flight")
    assert {k: up[k] for k in keys} == {k: ref[k] for k in keys}
    assert up["d2h_tokens"] > 0  # 0.5.23's selective write-through backs up little here, but some


@needs_sglang
@pytest.mark.parametrize("args,line", [
    (["--attention", "mha", "--heads", "3", "--kv-dim", "1"], "hicache: --kv-dim: a token's row of a layer"),
    (["--attention", "mha", "--heads", "2", "--kv-dim", "64", "--host-layout", "page_head", "--io-backend", "direct"],
     "hicache: --io-backend: SGLang moves the page_head host layout by kernel only"),
])
def test_the_command_names_the_option_the_engine_refuses(args, line, capsys):
    assert cli_main(["replay", "--engine", "sglang", "--limit", "2", "--layers", "1", "--l1-tokens", "16K",
                     "--l2-tokens", "64K", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1, err
