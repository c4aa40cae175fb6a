"""L3 on the sglang engine without SGLang: the options it refuses (one line naming each, before
anything is built), the object order it reports, and the reference's `--prefetch-anchor` switch the
differential suite found (SGLang 0.5.23 prefetches only past a backed-up or empty match)."""

from __future__ import annotations

import pytest

from hicache_ref.engines.sglang import storage
from hicache_ref.sim.replay import replay
from hicache_ref.sim.trace import find_trace, read_trace
from hicache_ref.spec import CacheSpec

L3 = dict(l3="file:/tmp/hicache-unused", materialize=True, l2_tokens=4096, page_size=16, prefetch_policy="wait_complete")


def _spec(**over):
    return CacheSpec.preset("sglang-0.5.23", **{**L3, **over})


@pytest.mark.parametrize("over, option", [
    (dict(l3="memory:"), "--l3"),
    (dict(l3="file:/tmp/x,max_bytes=1G"), "--l3"),
    (dict(key_scheme="harness"), "--l3-keys"),
    (dict(prefetch_policy="timeout"), "--prefetch-policy"),
    (dict(prefetch_policy="best_effort"), "--prefetch-policy"),
    (dict(prefetch_anchor="any"), "--prefetch-anchor"),
    (dict(l3_tag="t"), "--l3-tag"),
    (dict(trailer="on"), "--l3-trailer"),
    (dict(extra_key="lora"), "--l3-extra-key"),
    (dict(prefetch_limit_tokens=64), "--prefetch-limit"),
    (dict(prefetch_slack_seconds=0.01), "--prefetch-slack-ms"),
])
def test_the_engine_refuses_what_upstreams_store_does_not_do_naming_the_option(over, option):
    spec = _spec(**over)
    with pytest.raises(ValueError) as e:
        storage.refuse_unsupported(spec.storage, spec.semantics.overrides)
    assert str(e.value).startswith(f"{option}:") and "\n" not in str(e.value)


def test_a_preset_that_models_no_gate_is_not_a_request_to_upstream():
    spec = CacheSpec.preset("reference", **L3)  # its prefetch_anchor is "any": the reference's model
    assert spec.storage.prefetch_anchor == "any" and "prefetch_anchor" not in spec.semantics.overrides
    storage.refuse_unsupported(spec.storage, spec.semantics.overrides)


def test_a_plain_file_store_is_upstreams_hicache_file_in_that_directory(tmp_path):
    spec = _spec(l3=f"file:{tmp_path}", prefetch_threshold=64, l3_model="org/m")
    storage.refuse_unsupported(spec.storage)
    fields = storage.server_fields(spec.storage)
    assert fields["hicache_storage_backend"] == "file" and fields["file_storage_path"] == str(tmp_path)
    assert '"prefetch_threshold": 64' in fields["hicache_storage_backend_extra_config"]
    assert fields["served_model_name"] == "org/m" and storage.server_fields(CacheSpec().storage) == {}


def test_the_object_order_is_the_host_layout_upstream_writes_in():
    spec = _spec(host_layout="layer_first", io_backend="direct")
    assert spec.storage.object_layout == "page_first"  # the default: the default server's order
    assert storage.with_upstream_order(spec).storage.object_layout == "layer_first"
    with pytest.raises(ValueError, match="^--l3-object-layout: .*layer_first"):
        storage.with_upstream_order(_spec(host_layout="layer_first", io_backend="direct", object_layout="page_head"))


def test_stored_objects_counts_hicache_files_only(tmp_path):
    spec = _spec(l3=f"file:{tmp_path / 'store'}")
    assert storage.stored_objects(spec.storage) == 0  # before upstream made the directory
    (tmp_path / "store").mkdir()
    for name in ("a_.bin", "b_.bin", "notes.txt"):
        (tmp_path / "store" / name).write_bytes(b"x")
    (tmp_path / "store" / "link_.bin").symlink_to(tmp_path / "store" / "a_.bin")
    assert storage.stored_objects(spec.storage) == 2


def test_the_backed_up_anchor_keeps_write_back_from_asking_l3_past_an_l1_only_prefix():
    """Conversation requests all start with one shared block; under write_back it stays in L1 and is
    never backed up, so with SGLang 0.5.23's gate no request asks L3 anything, where the same
    slice without the gate reads from L3 (priced store, the seed geometry)."""
    requests = read_trace(find_trace("conversation_trace.jsonl"), 300)
    base = dict(l3="model:", l1_tokens=16384, l2_tokens=32768, page_size=16, write_policy="write_back",
                prefetch_policy="wait_complete")
    gated = replay(CacheSpec.preset("sglang-0.5.23", **base), requests)
    ungated = replay(CacheSpec.preset("sglang-0.5.23", prefetch_anchor="any", **base), requests)
    assert gated["l3_anchor_rule"] == "backed_up" and ungated["l3_anchor_rule"] == "any"
    assert ungated["l3_hit_tokens"] > 0 and gated["l3_hit_tokens"] == 0
    assert gated["l3_unbacked_anchor"] > 0 == ungated["l3_unbacked_anchor"]
    assert gated["l3_lookups"] < ungated["l3_lookups"]
