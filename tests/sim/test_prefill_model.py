"""Prefill from first principles (hicache_ref.sim.prefill_model): FLOPs counted by hand for known
architectures, the exact mapping onto fixed + a (n - c) + b (n^2 - c^2), the check against the
seed's derived terms on p800 (reported, not forced), and which compute model a profile prices with."""

from __future__ import annotations

import dataclasses

import pytest

from hardware_profiles import load_profile
from hicache_ref.models.presets import PRESETS
from hicache_ref.sim import mechanisms as mech
from hicache_ref.sim import prefill_model as pm


def test_flops_of_known_architectures_match_the_hand_count():
    llama = PRESETS["llama-3.1-8b"]
    # 2 x 8.03e9 matrix FLOPs per token; attention 2 x 32 layers x 32 heads x (128 + 128) per pair
    assert llama.matrix_flops_per_token() == 1.606e10
    assert llama.attention_flops_per_pair() == 524_288
    assert llama.prefill_flops(1000) == pytest.approx(1.606e10 * 1000 + 524_288 * 500_500, rel=1e-15)
    ds = PRESETS["deepseek-v3"]
    # 2 x 37e9 active; MLA prefill attends in MHA form: 2 x 61 x 128 heads x (192 qk + 128 v)
    assert ds.matrix_flops_per_token() == 7.4e10
    assert ds.attention_flops_per_pair() == 4_997_120
    # 4096 new tokens after 1024 cached: pairs = (4096 x 4097 - 1024 x 1025) / 2 = 7,865,856
    assert ds.prefill_flops(4096, 1024) == pytest.approx(7.4e10 * 3072 + 4_997_120 * 7_865_856, rel=1e-15)


@pytest.mark.parametrize("name", ["deepseek-v3", "llama-3.1-70b", "qwen3-235b-a22b"])
def test_the_terms_are_the_flops_over_the_group_throughput_exactly(name):
    arch = PRESETS[name]
    fp = pm.terms(arch, tp=8, peak_tflops=989, mfu=0.45, fixed_s=0.1)
    rate = 8 * 989e12 * 0.45
    for n, c in ((1, 0), (4096, 0), (32768, 8192), (65536, 65535)):
        assert fp.seconds(n, c) == pytest.approx(0.1 + arch.prefill_flops(n, c) / rate, rel=1e-12)
    half = pm.terms(arch, tp=16, peak_tflops=989, mfu=0.45, fixed_s=0.1)  # twice the ranks: half the time
    assert half.per_token_s == pytest.approx(fp.per_token_s / 2) and \
        half.per_token_pair_s == pytest.approx(fp.per_token_pair_s / 2)


def test_without_a_fixed_part_the_floor_is_one_read_of_a_ranks_weights():
    fp = pm.terms(PRESETS["deepseek-v3"], tp=8, peak_tflops=989, mfu=0.45, hbm_gbps=4800)
    assert fp.fixed_s == pytest.approx(671e9 / 8 / 4.8e12)  # 17.5 ms
    with pytest.raises(ValueError, match="fixed_s, hbm_gbps"):
        pm.terms(PRESETS["deepseek-v3"], tp=8, peak_tflops=989, mfu=0.45)


def test_h200_prices_prefill_from_its_datasheet_and_the_assumed_mfu():
    h200 = load_profile("h200")
    assert not h200.compute.known  # its own a and b are unknown
    c = pm.require_compute(h200)
    expected = pm.terms(PRESETS["deepseek-v3"], 8, 989, 0.45, fixed_s=0.1)
    assert (c.prefill_fixed_s, c.prefill_per_token_s, c.prefill_per_token_pair_s) == \
        (expected.fixed_s, expected.per_token_s, expected.per_token_pair_s)
    assert c.l2_path_fixed_s == h200.compute.l2_path_fixed_s
    assert "compute.prefill_mfu" in h200.assumptions() and h200.ranges["compute.prefill_mfu"] == (0.3, 0.6)
    # another model on the same device
    other = pm.require_compute(h200, model="llama-3.1-70b", tp=4)
    assert other.prefill_per_token_s == pytest.approx((1.412e11 + 2 * 80 * 64 * 256 / 2) / (4 * 989e12 * 0.45))


def test_a_profile_with_its_own_terms_keeps_them_and_one_without_anything_names_what_to_measure():
    p800 = load_profile("p800")
    assert pm.require_compute(p800) is p800.compute
    with pytest.raises(mech.Unpriced) as e:
        pm.require_compute(load_profile("emu"))
    assert "compute.prefill_model" in str(e.value) and "hicache calibrate --prefill" in str(e.value)
    no_peak = dataclasses.replace(load_profile("h200"), device=dataclasses.replace(
        load_profile("h200").device, peak_bf16_tflops=None))
    with pytest.raises(mech.Unpriced, match="device.peak_bf16_tflops of NVIDIA H200 SXM is not known"):
        pm.require_compute(no_peak)
    assert pm.compute_of(no_peak) is None and pm.compute_of(None) is None


def test_p800_first_principles_against_the_seed_terms_is_reported():
    """The check of the first-principles path: the seed's a and b against DeepSeek-V3 at TP 8. P800's
    peak is not published, so the ratio of b/a (device-free) and the TFLOPS per rank each derived
    term implies are reported; with a peak and MFU given, a and b's own ratios are too."""
    p800 = load_profile("p800")
    r = pm.seed_ratio(p800, "deepseek-v3", 8)
    c = p800.compute
    assert r["shape_b_over_a_seed"] == pytest.approx(c.prefill_per_token_pair_s / c.prefill_per_token_s)
    assert r["shape_b_over_a_first_principles"] == pytest.approx(2_498_560 / (7.4e10 + 2_498_560))
    assert r["implied_tflops_per_rank_from_a"] == pytest.approx((7.4e10 + 2_498_560) / 8 / c.prefill_per_token_s / 1e12)
    assert "device.peak_bf16_tflops" in r["a_b_ratio_not_computed"]
    print(f"\np800 vs deepseek-v3 TP 8: b/a seed / first principles = {r['shape_ratio_seed_over_first_principles']:.3g}; "
          f"implied TFLOPS per rank from a {r['implied_tflops_per_rank_from_a']:.4g}, "
          f"from b {r['implied_tflops_per_rank_from_b']:.4g}")
    with_peak = dataclasses.replace(p800, device=dataclasses.replace(p800.device, peak_bf16_tflops=500.0),
                                    compute=dataclasses.replace(c, prefill_mfu=0.5))
    r = pm.seed_ratio(with_peak, "deepseek-v3", 8)
    assert r["a_ratio_first_principles_over_seed"] == pytest.approx(r["implied_tflops_per_rank_from_a"] / 250.0)
    assert r["b_ratio_first_principles_over_seed"] == pytest.approx(r["implied_tflops_per_rank_from_b"] / 250.0)
