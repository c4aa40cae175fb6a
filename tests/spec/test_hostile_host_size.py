"""A hostile pass on SGLang's own sizes (docs/hostile-cases.md, round 4): a host pool that
`--hicache-size` or `--hicache-ratio` makes larger than the profile's host memory (less upstream's
10 GiB reserve, every rank of the TP group on the node taking its pool) is refused naming the
option, as upstream refuses to start with it; it was replayed and priced (5,000 GB on a 1.6 TB node)."""

from __future__ import annotations

import pytest

from hicache_ref.spec import CacheSpec, SpecError

P800_HOST = 8 * 187 * 2**30 - 10 * 2**30  # profile p800's host memory less upstream's reserve


@pytest.mark.parametrize("kw, option", [
    (dict(hicache_size=5000), "--hicache-size"),
    (dict(hicache_size=200, tp=8), "--hicache-size"),
    (dict(hicache_ratio=400.0), "--hicache-ratio")])
def test_a_host_pool_past_the_profiles_memory_is_refused_naming_the_option(kw, option):
    with pytest.raises(SpecError) as e:
        CacheSpec.of(profile="p800", l1_tokens=50_000, **kw)
    assert e.value.option == option and "upstream refuses to start" in str(e.value), str(e.value)


@pytest.mark.parametrize("kw", [dict(hicache_size=190, tp=8), dict(hicache_size=1500), dict(hicache_ratio=4.0, tp=8)])
def test_a_host_pool_within_the_profiles_memory_is_sized(kw):
    spec = CacheSpec.of(profile="p800", l1_tokens=50_000, **kw)
    ranks = kw.get("tp", 1)
    assert spec.tiers.l2_tokens * spec.geometry.token_bytes * ranks <= P800_HOST


def test_a_profile_without_host_memory_leaves_the_size_to_the_user():
    spec = CacheSpec.of(profile="h200", l1_tokens=50_000, hicache_size=5000)
    assert spec.tiers.l2_tokens > 50_000


@pytest.mark.parametrize("model, tp, what", [("deepseek-v3", 3, "128 attention heads"),
                                             ("llama-3.1-8b", 3, "32 attention heads"),
                                             ("llama-3.1-70b", 12, "64 attention heads")])
def test_a_tp_the_model_cannot_split_over_is_refused_naming_tp(model, tp, what):
    """--model deepseek-v3 --tp 3 was sized and advised (`--tp-size 3` printed), which SGLang's
    attention refuses (heads % tp); llama-3.1-8b at TP 3 was priced with 2 of its 8 KV heads a rank."""
    with pytest.raises(SpecError) as e:
        CacheSpec.of(profile="h200", model=model, tp=tp, l1_tokens=50_000)
    assert e.value.option == "--tp" and what in str(e.value) and "SGLang refuses it" in str(e.value), str(e.value)


@pytest.mark.parametrize("model, tp, heads", [("llama-3.1-8b", 16, 1), ("llama-3.1-70b", 4, 2),
                                              ("qwen3-235b-a22b", 8, 1), ("deepseek-v3", 8, 1)])
def test_a_tp_the_model_splits_over_is_sized(model, tp, heads):
    spec = CacheSpec.of(profile="h200", model=model, tp=tp, l1_tokens=50_000)
    assert spec.geometry.heads == heads


def test_kv_heads_that_neither_split_nor_replicate_evenly_are_refused():
    from hicache_ref.models.architecture import ModelArch

    m = ModelArch("odd", attention="mha", layers=2, kv_heads=6, kv_dim=128, heads=24)
    with pytest.raises(ValueError, match="6 KV heads neither split evenly over TP 4"):
        m.token_kv_bytes(4)
    assert m.kv_heads_per_rank(3) == 2 and m.kv_heads_per_rank(12) == 1  # split; replicated on 2 ranks each


def test_a_memory_share_with_no_model_to_size_is_refused_not_dropped():
    """`advise --l1-tokens 20K --mem-fraction-static 0.9` ran as if the share had not been given."""
    with pytest.raises(SpecError) as e:
        CacheSpec.of(profile="h200", l1_tokens=20_000, mem_fraction_static=0.9)
    assert e.value.option == "--mem-fraction-static" and "give --model" in str(e.value)
    assert "not used" in str(e.value)


def test_a_memory_share_beside_a_given_l1_is_refused_not_dropped():
    """`advise --model llama-3.1-70b --l1-tokens 100K --mem-fraction-static 0.5` sized L1 as given,
    the share unsaid and left out of the launch flags."""
    with pytest.raises(SpecError) as e:
        CacheSpec.of(profile="h200", model="llama-3.1-70b", l1_tokens=100_000, mem_fraction_static=0.5)
    assert e.value.option == "--mem-fraction-static" and "--l1-tokens gives L1" in str(e.value)
    sized = CacheSpec.of(profile="h200", model="llama-3.1-70b", mem_fraction_static=0.9)
    assert sized.machine_sizing["mem_fraction_static"] == 0.9
