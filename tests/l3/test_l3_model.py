"""The model L3 store (`--l3 model:`): the same L3 decisions as a materialized file L3 with no bytes,
its capacity sweep and plateau, and the uplink L3 shares with L2 write-back priced only when both run."""

from __future__ import annotations

import pytest

from hardware_profiles import load_profile
from hicache_ref.sim.price import cost
from hicache_ref.sim.price import mechanisms as mech
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.sweep.sweep_l3 import starved_l3_warning, sweep_l3
from hicache_ref.sim.trace.reader import find_trace, read_trace
from hicache_ref.sim.trace.synth import synthesize_trace
from hicache_ref.spec import CacheSpec
from hicache_ref.storage.integrity import TRAILER_BYTES
from hicache_ref.storage.model import ModelStorage

TINY = dict(attention="mla", layers=1, kv_dim=4, dtype="bf16")  # the materialized side: 8 bytes a token
DECISIONS = ("l3_hit_tokens", "l3_prefetches", "l3_lookups", "l3_pages_read", "l3_pages_written",
             "l3_pages_present", "l3_miss_pages", "hit_rate", "l1_hit_tokens", "l2_hit_tokens")


def _pair(tmp_path, trace, limit, policy, l1, l2, l3_pages, page_size, key_scheme="sglang"):
    """(file L3 materialized at the tiny geometry, model L3 at the seed geometry) on one slice."""
    requests = read_trace(find_trace(trace), limit)
    tiers = dict(l1_tokens=l1, l2_tokens=l2, write_policy=policy, page_size=page_size, profile="emu",
                 key_scheme=key_scheme)
    bound = "" if l3_pages is None else f",max_bytes={l3_pages * (page_size * 8 + TRAILER_BYTES)}"
    real = replay(CacheSpec.of(**TINY, **tiers, materialize=True, l3=f"file:{tmp_path}{bound}"), requests)
    model = replay(CacheSpec.of(**tiers, l3="model:", **({} if l3_pages is None else dict(l3_tokens=l3_pages * page_size))),
                   requests)
    assert model["geometry"]["layers"] == 78 and model["materialize"] is False
    return real, model


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
@pytest.mark.parametrize("l3_pages", [None, 300], ids=["loose", "tight"])
@pytest.mark.parametrize("key_scheme", ["sglang", "harness"])
@pytest.mark.slow
def test_model_l3_decides_as_a_materialized_file_l3_synthetic(tmp_path, policy, l3_pages, key_scheme):
    real, model = _pair(tmp_path, "synthetic_trace.jsonl", 60, policy, 16_000, 32_000, l3_pages, 256, key_scheme)
    assert {k: model[k] for k in DECISIONS} == {k: real[k] for k in DECISIONS}
    assert real["l3_pages_written"] > 0 and real["kv_mismatch_tokens"] == 0
    if l3_pages is None:
        assert real["l3_hit_tokens"] > 0


@pytest.mark.slow
def test_a_tight_model_l3_holds_its_bound_and_loses_hits(tmp_path):
    _, loose = _pair(tmp_path / "a", "synthetic_trace.jsonl", 60, "write_through", 16_000, 32_000, None, 256)
    _, tight = _pair(tmp_path / "b", "synthetic_trace.jsonl", 60, "write_through", 16_000, 32_000, 300, 256)
    assert tight["l3_stored_pages"] == 300 and tight["l3_max_tokens"] == 300 * 256
    assert 0 < tight["l3_hit_tokens"] < loose["l3_hit_tokens"]


@pytest.mark.slow
@pytest.mark.parametrize("policy,l3_pages", [("write_through", None), ("write_back", 1500)])
def test_model_l3_decides_as_a_materialized_file_l3_conversation(tmp_path, policy, l3_pages):
    real, model = _pair(tmp_path, "conversation_trace.jsonl", 200, policy, 4_000, 8_000, l3_pages, 64)
    assert {k: model[k] for k in DECISIONS} == {k: real[k] for k in DECISIONS}
    assert real["l3_pages_written"] > 0


def test_model_store_is_an_lru_of_keys_without_bytes():
    store = ModelStorage(max_tokens=128)
    store.size_pages(64, 1000)
    assert store.set(["a", "b"]) == [True, True] and store.exists(["a", "b", "c"]) == 2
    assert store.get(["a"]) == [True]  # a is now the most recent
    store.set(["c"])
    assert store.exists(["b"]) == 0 and store.exists(["a", "c"]) == 2
    assert store.stats.bytes_read == 1000 and store.stats.bytes_written == 3000
    assert store.max_bytes == 2 * (1000 + TRAILER_BYTES)


def test_spec_options_of_the_model_store():
    assert CacheSpec.of(l2_tokens=1_000_000, l3="model:", l3_tokens=1_000_000).storage.l3_tokens == 1_000_000
    with pytest.raises(ValueError, match="^--l3-tokens: sizes the model store"):
        CacheSpec.of(l2_tokens=1_000_000, materialize=True, l3="file:/tmp/x", l3_tokens=64)
    with pytest.raises(ValueError, match="^--l3: model: moves no bytes"):
        CacheSpec.of(l2_tokens=1_000_000, materialize=True, l3="model:")
    with pytest.raises(ValueError, match="takes no arguments"):
        ModelStorage.from_spec("max_bytes=1G", "model:max_bytes=1G")


def test_selective_writes_with_a_tight_l2_warn_naming_the_option():
    spec = CacheSpec.of(l1_tokens=60_000, l2_tokens=200_000, l3="model:")
    assert "--write-policy" in starved_l3_warning(spec, 10_000_000)
    assert starved_l3_warning(spec.replace(write_policy="write_through"), 10_000_000) is None
    assert starved_l3_warning(spec, 300_000) is None  # L2 holds most of the trace
    # after the run: quiet where L3 served a real share anyway, as on the seed ladder's L3 rung
    assert "--write-policy" in starved_l3_warning(spec, 10_000_000, l3_hit_tokens=99_999)
    assert starved_l3_warning(spec, 10_000_000, l3_hit_tokens=100_000) is None


@pytest.mark.slow
def test_the_l3_sweep_plateaus_on_a_trace_built_to_plateau():
    # 24 conversations of short turns: every page the trace has fits in an L3 of 2M tokens, so
    # the curve rises while L3 grows towards that and is flat past it.
    trace = synthesize_trace(240, 2_000, 12_000, reuse=0.8, sessions=24).requests
    unique = len({h for r in trace for h in r.hash_ids}) * 512
    spec = CacheSpec.of(l1_tokens=16_000, l2_tokens=32_000, write_policy="write_through", profile="p800")
    tiers = [64_000, 256_000, unique * 2, unique * 4]
    r = sweep_l3(spec, trace, tiers, plateau_gain=0.001)
    rates = [t["hit_rate"] for t in r["tiers"]]
    assert rates == sorted(rates) and rates[0] > r["without_l3_hit_rate"]
    assert rates[-1] == rates[-2] and r["tiers"][-1]["marginal_gain"] == 0
    from hicache_ref.sim.sweep.plateau import find_plateau

    # the hit-rate curve is flat past the trace's pages; priced on p800 every L3 tier loses more than the
    # same L1 and L2 without L3, so the sweep names no plateau and says none pays
    assert find_plateau(tiers, rates, r["without_l3_hit_rate"], 0.001).plateau_l2_tokens < tiers[-1]
    assert all(t["net_benefit_seconds"] < r["without_l3_net_benefit_seconds"] for t in r["tiers"])
    assert r["none_pays"] and r["plateau_l3_tokens"] is None and not r["on_plateau"]
    assert all(t["l3_bytes_written"] > 0 for t in r["tiers"]) and r["tiers"][-1]["l3_bytes_read"] > 0
    assert all(t["net_benefit_seconds"] is not None for t in r["tiers"])
    # every tier, and the top at the capacity to deploy, carries the answer and its intervals
    for t in r["tiers"]:
        lo, hi = t["ttft_change_pct_interval"]
        assert t["answer"] in ("gain", "loss", "undecided") and lo <= t["ttft_change_pct"] <= hi
        assert len(t["net_benefit_seconds_interval"]) == 2
    # no tier pays, so there is no capacity to deploy and no answer at the top of its own
    assert r["answer_l3_tokens"] is None and r["answer"] is None and r["ttft_change_pct_interval"] is None


def test_shared_uplink_raises_modeled_seconds_only_when_both_run():
    p800 = load_profile("p800")
    state = mech.HostState()
    gb = 10**9
    busy = mech.l3_seconds(p800, "read", 1000, 40 * gb, 10)
    assert mech.shared_uplink_seconds(p800, 10 * gb, 0, 0.0, state) == 0.0
    assert mech.shared_uplink_seconds(p800, 0, 40 * gb, busy, state) == 0.0
    both = mech.shared_uplink_seconds(p800, 10 * gb, 40 * gb, busy, state)
    assert both > 0  # 50 GB over one 24 GB/s uplink takes longer than either stream alone
    assert both == pytest.approx(50 / 24 - max(10 / 7.4, busy))
    assert "l3_link.uplink_gbps" in p800.assumptions()

    base = dict(l3="model:", d2h_bytes=10 * gb, l3_bytes_read=40 * gb, l3_bytes_written=0, l3_pages_read=1000,
                l3_pages_written=0, l3_prefetches=10, l3_modeled_stall_seconds=0.5)
    costs = {name: cost.l3_link_figures(p800, {**base, **change}, state)
             for name, change in (("both", {}), ("no_d2h", dict(d2h_bytes=0)),
                                  ("no_l3", dict(l3_bytes_read=0, l3_pages_read=0, l3_prefetches=0)))}
    assert costs["no_d2h"]["l3_shared_uplink_seconds"] == costs["no_l3"]["l3_shared_uplink_seconds"] == 0.0
    assert costs["both"]["l3_service_seconds"] > costs["no_d2h"]["l3_service_seconds"]
    assert costs["no_d2h"]["l3_service_seconds"] == 0.5  # the stall alone


def test_the_tier_link_and_the_mechanism_price_a_read_alike():
    from hicache_ref.l3.prefetch_policy import L3Link

    p800 = load_profile("p800")
    link = L3Link.from_profile(p800, 5_750_784)
    assert link.read_seconds(7) == pytest.approx(mech.l3_seconds(p800, "read", 7, 7 * 5_750_784, 1))
    assert link.basis.startswith("profile p800 (assumed:")
    assert L3Link.from_profile(load_profile("emu"), 100).basis == "assumed"


def test_replay_at_the_seed_geometry_takes_a_model_l3_in_seconds(synthetic):
    fig = replay(CacheSpec.of(l1_tokens=60_000, l2_tokens=200_000, write_policy="write_through", profile="p800",
                              l3="model:", l3_tokens=4_000_000), synthetic, 150)
    assert fig["l3_hit_tokens"] > 0 and fig["wall_seconds"] < 30
    assert fig["l3_link_read_seconds"] > 0 and fig["net_benefit_service"]["l3"] > 0
    assert "l3_link.read_gbps" in fig["net_benefit_assumed_inputs"]


@pytest.mark.slow
def test_sweep_cli_grows_l3_over_one_l2_and_plots(tmp_path, capsys):
    from conformance.cli.main import main as cli_main

    code = cli_main(["sweep", "--limit", "40", "--l1-tokens", "16K", "--l2-tokens", "32K", "--l3-tokens", "64K,1M",
                     "--write-policy", "write_through", "--trace", str(find_trace("synthetic_trace.jsonl")),
                     "--out", str(tmp_path), "--quiet"])
    assert code == 0 and (tmp_path / "sweep.png").stat().st_size > 0
    assert "L3 tokens" in capsys.readouterr().out
    assert cli_main(["sweep", "--l1-tokens", "16K", "--l2-tokens", "32K,64K", "--l3-tokens", "64K", "--quiet"]) == 2
    assert "hicache: --l2-tokens: with --l3-tokens: one L2 capacity" in capsys.readouterr().err


def test_a_served_replay_takes_the_model_l3(synthetic):
    from hicache_ref.sim.run.served_replay import replay_served

    fig = replay_served(CacheSpec.of(l1_tokens=60_000, l2_tokens=120_000, write_policy="write_through",
                                     concurrency=8, l3="model:", profile="p800"), read_trace(synthetic, 80))
    assert fig["l3_pages_written"] > 0 and fig["l3_errors"] == 0
