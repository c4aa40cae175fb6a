"""The spec's rules: each cross-field rule is refused once, when the spec is made, naming the option
and the field; presets resolve, upstream-style L2 sizing resolves, and the spec echoes as a dict."""

from __future__ import annotations

import pytest

from hicache_ref.spec import CacheSpec, SpecError, StorageSpec, TiersSpec, register_preset
from hicache_ref.spec.presets import PRESETS


@pytest.mark.parametrize("fields, option, field", [
    (dict(l3="file:/tmp/x", l2_tokens=4096), "--l3", "storage.l3"),  # needs --materialize
    (dict(l3="memory:", materialize=True, l1_tokens=4096, l2_tokens=0), "--l3", "storage.l3"),
    (dict(l3="memory:", materialize=True, l1_tokens=4096, tp=2), "--l3", "storage.l3"),
    (dict(l3="nosuchstore:x", materialize=True), "--l3", "storage.l3"),
    (dict(prefetch_policy="best_effort"), "--prefetch-policy", "storage.prefetch_policy"),
    (dict(prefetch_slack_seconds=0.5), "--prefetch-slack-ms", "storage.prefetch_slack_seconds"),
    (dict(shared_host=True), "--shared-host", "tp.shared_host"),
    (dict(timestamps=True), "--timestamps", "serving.timestamps"),
    (dict(ghost_entries=10), "--ghost-entries", "tiers.ghost_entries"),
    (dict(heads=2), "--heads", "geometry.heads"),
    (dict(host_layout="page_head"), "--host-layout", "tiers.host_layout"),  # MLA
    (dict(l1_tokens=10), "--l1-tokens", "tiers.l1_tokens"),  # no whole page of 64
    (dict(l2_tokens=10), "--l2-tokens", "tiers.l2_tokens"),
    (dict(hicache_ratio=2.0, hicache_size=4), "--hicache-size", "tiers.hicache_size"),
    (dict(hicache_ratio=2.0, l1_tokens=4096, l2_tokens=8192), "--hicache-ratio", "tiers.hicache_ratio"),
    (dict(hicache_ratio=2.0), "--hicache-ratio", "tiers.hicache_ratio"),  # needs --l1-tokens
    (dict(hicache_ratio=0.5, l1_tokens=64_000), "--hicache-ratio", "tiers.hicache_ratio"),  # host <= device
    (dict(semantics="nosuch"), "--semantics", "semantics.preset"),
    (dict(write_policy="sometimes"), "--write-policy", "tiers.write_policy"),
    (dict(materialize=True, kv_dim=3, dtype="fp32", layers=1, l1_tokens=4096, l2_tokens=8192), "--kv-dim",
     "geometry.kv_dim"),  # a 12-byte row: upstream's copies move 8-byte words
    (dict(materialize=True, attention="mha", heads=1, kv_dim=1, layers=1, l1_tokens=4096, l2_tokens=8192), "--kv-dim",
     "geometry.kv_dim"),
])
def test_each_rule_is_refused_naming_its_option(fields, option, field):
    with pytest.raises(SpecError) as e:
        CacheSpec.of(**fields)
    assert (e.value.option, e.value.field) == (option, field)
    assert str(e.value).startswith(f"{option}: ")
    assert isinstance(e.value, ValueError)


def test_a_tp_replay_with_concurrency_is_accepted_as_ablate_accepts_it(tmp_path):
    """--tp with --concurrency everywhere: one rank's served replay stands for the group (the spec
    refuses nothing; what fails here is the missing trace, named)."""
    from hicache_ref.sim.run.replay_dispatch import run_replay

    with pytest.raises((FileNotFoundError, ValueError), match="absent.jsonl"):
        run_replay(CacheSpec.of(tp=2, concurrency=4), tmp_path / "absent.jsonl")


def test_presets_resolve_and_overrides_are_listed():
    up = CacheSpec.preset("seed", evict_size="shortfall")
    assert (up.semantics.hit_count, up.tiers.io_backend, up.tiers.free_list) == ("per_insert", "kernel", "upstream_l1")
    assert up.semantics.overrides == ("evict_size",)
    ref = CacheSpec()
    assert ref.tiers.host_free_list == ref.tiers.free_list == "fifo" and ref.semantics.overrides == ()
    assert ref.effective_host_layout == "layer_first"
    assert CacheSpec.of(host_layout="page_first").effective_host_layout == "page_first_direct"  # direct
    assert CacheSpec.of(host_layout="page_first", io_backend="kernel").effective_host_layout == "page_first"


def test_a_registered_preset_is_a_new_name_not_a_new_field():
    register_preset("test-only", **{**PRESETS["seed"], "evict_size": "shortfall"})
    try:
        spec = CacheSpec.preset("test-only")
        assert spec.semantics.evict_size == "shortfall" and spec.semantics.overrides == ()
    finally:
        del PRESETS["test-only"]


def test_upstream_sizing_resolves_l2_once():
    spec = CacheSpec.of(l1_tokens=64_000, hicache_ratio=2.0)
    assert spec.tiers.l2_tokens == (128_000 // 64 + 1) * 64
    assert spec.host_sizing["host_tokens"] == spec.tiers.l2_tokens
    assert spec.replace(write_policy="write_back").tiers.l2_tokens == spec.tiers.l2_tokens  # not sized twice


def test_nodes_check_their_own_fields():
    with pytest.raises(SpecError, match="^--l3: "):
        StorageSpec(l3="nosuchstore:")
    with pytest.raises(SpecError, match="^--l1-tokens: "):
        TiersSpec(l1_tokens=0)


def test_the_spec_echoes_as_a_nested_dict():
    d = CacheSpec.of(l1_tokens=4096, semantics="sglang-0.5.23").to_dict()
    assert d["tiers"]["l1_tokens"] == 4096 and d["semantics"]["preset"] == "sglang-0.5.23"
    assert set(d) >= {"geometry", "tiers", "semantics", "storage", "serving", "tp", "profile"}


def test_rows_of_any_width_are_priced_and_rows_of_8_byte_words_move():
    from hicache_ref.spec.geometry import unaligned_rows

    odd = CacheSpec.of(attention="mha", heads=3, kv_dim=1, layers=1, l1_tokens=4096, l2_tokens=8192)
    assert "is 6 bytes, not a multiple of the 8 bytes" in unaligned_rows(odd.geometry)  # priced: accepted
    for heads, kv_dim in ((4, 1), (1, 4), (2, 2)):  # 8 bytes a row: copied
        spec = CacheSpec.of(attention="mha", heads=heads, kv_dim=kv_dim, layers=1, materialize=True, l1_tokens=4096,
                            l2_tokens=8192)
        assert unaligned_rows(spec.geometry) is None
