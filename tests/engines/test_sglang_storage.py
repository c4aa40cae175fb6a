"""L3 on the sglang engine without SGLang: the options it refuses (one line naming each, before
anything is built), the object order it reports, and the reference's `--prefetch-anchor` switch the
differential suite found (SGLang 0.5.23 prefetches only past a backed-up or empty match)."""

from __future__ import annotations

import json

import pytest

from hicache_ref.engines import refusal
from hicache_ref.engines.sglang import l3_objects as storage
from hicache_ref.engines.sglang import stores
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.trace.reader import find_trace, read_trace
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
    (dict(l3="mooncake:auto,buffer=64M"), "--l3"),
    (dict(l3="mooncake:auto,digest=sha256"), "--l3"),
    (dict(l3="mooncake:auto,segmnt=1G"), "--l3"),
    (dict(l3="mooncake:127.0.0.1:8080,127.0.0.1:50051"), "--l3"),
    (dict(l3="mooncake:http://127.0.0.1:8080/metadata"), "--l3"),
    (dict(l3="mooncake:auto", extra_key="lora"), "--l3-extra-key"),
])
def test_the_engine_refuses_what_upstreams_store_does_not_do_naming_the_option(over, option):
    why = refusal("sglang", _spec(**over))
    assert why is not None and why.startswith(f"{option}:") and "\n" not in why


def test_a_preset_that_models_no_gate_is_not_a_request_to_upstream():
    spec = CacheSpec.preset("reference", **L3)  # its prefetch_anchor is "any": the reference's model
    assert spec.storage.prefetch_anchor == "any" and "prefetch_anchor" not in spec.semantics.overrides
    assert refusal("sglang", spec) is None


def test_a_plain_file_store_is_upstreams_hicache_file_in_that_directory(tmp_path):
    spec = _spec(l3=f"file:{tmp_path}", prefetch_threshold=64, l3_model="org/m")
    assert refusal("sglang", spec) is None
    fields = stores.open_store(spec.storage).server_fields()
    assert fields["hicache_storage_backend"] == "file" and fields["file_storage_path"] == str(tmp_path)
    assert json.loads(fields["hicache_storage_backend_extra_config"]) == {"prefetch_threshold": 64}
    assert fields["served_model_name"] == "org/m" and stores.open_store(CacheSpec().storage) is None


def test_a_mooncake_store_is_upstreams_mooncake_store_on_that_cluster():
    """An explicit cluster is only named (nothing connects before upstream's own client does); the
    reference spec's segment and host become upstream's settings, the tenant tag its backend tag."""
    spec = _spec(l3="mooncake:http://127.0.0.1:8080/metadata,127.0.0.1:50051,segment=1GiB", l3_tag="t1")
    assert refusal("sglang", spec) is None
    store = stores.open_store(spec.storage)
    assert store.cluster is None
    fields = store.server_fields()
    assert fields["hicache_storage_backend"] == "mooncake" and "file_storage_path" not in fields
    assert json.loads(fields["hicache_storage_backend_extra_config"]) == dict(
        prefetch_threshold=spec.storage.prefetch_threshold, master_server_address="127.0.0.1:50051",
        metadata_server="http://127.0.0.1:8080/metadata", protocol="tcp", global_segment_size=1 << 30,
        local_hostname="127.0.0.1", check_server=False, extra_backend_tag="t1")


def test_the_tenant_tag_is_refused_on_a_file_store_only():
    assert refusal("sglang", _spec(l3_tag="t1")).startswith("--l3-tag: ")
    assert refusal("sglang", _spec(l3="mooncake:auto", l3_tag="t1")) is None


def test_the_mooncake_store_counts_the_pages_upstreams_puts_stored():
    """A page is its `_k` object (MHA's `_v` rides along); a failed put and an existing key
    (upstream never puts it) are not written."""
    class Client:
        def batch_put_from(self, keys, ptrs, sizes):
            return [0 if "bad" not in k else -1 for k in keys]

        def batch_put_from_multi_buffers(self, keys, ptrs, sizes, config):
            return [0] * len(keys)

        def batch_is_exist(self, keys):
            return [1] * len(keys)

    c = stores._CountingClient(Client())
    assert c.batch_put_from(["a__k", "b_bad__k", "c_0_k", "c_0_v"], [], []) == [0, -1, 0, 0]
    c.batch_put_from_multi_buffers(["d__k"], [], [], None)
    assert c.pages == 3 and c.batch_is_exist(["x"]) == [1]


def test_the_object_order_is_the_host_layout_upstream_writes_in():
    spec = _spec(host_layout="layer_first", io_backend="direct")
    assert spec.storage.object_layout == "page_first"  # the default: the default server's order
    assert storage.with_upstream_order(spec).storage.object_layout == "layer_first"
    with pytest.raises(ValueError, match="^--l3-object-layout: .*layer_first"):
        storage.with_upstream_order(_spec(host_layout="layer_first", io_backend="direct", object_layout="page_head"))


def test_the_file_store_counts_hicache_files_it_gained_only(tmp_path):
    store_dir = tmp_path / "store"
    assert stores.stored_objects(str(store_dir)) == 0  # before upstream made the directory
    store_dir.mkdir()
    (store_dir / "old_.bin").write_bytes(b"x")
    store = stores.open_store(_spec(l3=f"file:{store_dir}").storage)
    for name in ("a_.bin", "b_.bin", "notes.txt"):
        (store_dir / name).write_bytes(b"x")
    (store_dir / "link_.bin").symlink_to(store_dir / "a_.bin")
    assert stores.stored_objects(str(store_dir)) == 3 and store.written() == 2


@pytest.mark.slow
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


def test_a_segment_the_machine_cannot_hold_is_refused_before_a_cluster_starts(monkeypatch):
    monkeypatch.setenv("HICACHE_MEMORY_BUDGET", str(64 << 20))
    started = []
    monkeypatch.setattr(stores, "start_loopback", lambda: started.append(1))
    with pytest.raises(ValueError, match="^--l3: needs ~"):
        stores.open_store(_spec(l3="mooncake:auto,segment=1GiB").storage)
    assert not started
