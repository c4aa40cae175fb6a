"""Model presets: KV bytes per rank, weights per rank and prefill FLOPs as computed by hand."""

import pytest

from hal.transfer.seed import SEED_GEOMETRY
from hicache_ref.models.architecture import ModelArch
from hicache_ref.models.catalog import PRESETS, load_model


def test_seed_preset_is_the_seed_geometry():
    assert PRESETS["seed-mla-78"].token_kv_bytes(8) == SEED_GEOMETRY.token_bytes == 89_856


def test_mla_latent_is_the_same_on_every_rank_and_mha_heads_split():
    ds, llama = PRESETS["deepseek-v3"], PRESETS["llama-3.1-70b"]
    assert ds.token_kv_bytes(1) == ds.token_kv_bytes(8) == 61 * 576 * 2
    assert llama.token_kv_bytes(1) == 80 * 2 * 8 * 128 * 2
    assert llama.token_kv_bytes(8) == 80 * 2 * 1 * 128 * 2
    assert PRESETS["qwen3-235b-a22b"].kv_heads_per_rank(8) == 1  # 4 KV heads over 8 ranks: replicated


def test_prefill_flops_by_hand():
    m = PRESETS["llama-3.1-8b"]
    # 3 new tokens after 2 cached: matrices 2 x 8.03e9 x 3; attention pairs 3 + 4 + 5 = 12
    pair = 2 * 32 * 32 * (128 + 128)
    assert m.prefill_flops(5, 2) == pytest.approx(2 * 8.03e9 * 3 + pair * 12)
    assert m.prefill_flops(5, 5) == 0


def test_unknown_figures_are_named():
    with pytest.raises(ValueError, match="total_params is not known"):
        PRESETS["seed-mla-78"].weight_bytes_per_rank(8)
    with pytest.raises(ValueError, match="kv_heads: MLA"):
        ModelArch("x", attention="mla", layers=2, kv_heads=2, kv_dim=8)
    with pytest.raises(ValueError, match="layers"):
        ModelArch("x", attention="mha", layers=0, kv_heads=2, kv_dim=8)


def test_yaml_model_and_refusals(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("attention: mha\nlayers: 4\nkv_heads: 2\nkv_dim: 64\n")
    assert load_model(str(f)).token_kv_bytes(1) == 4 * 2 * 2 * 64 * 2
    f.write_text("attention: mha\nlayers: 4\nkv_heads: 2\nkv_dim: 64\nbogus: 1\n")
    with pytest.raises(ValueError, match="bogus: unknown key"):
        load_model(str(f))
    with pytest.raises(ValueError, match="--model: unknown model 'nope'"):
        load_model("nope")
