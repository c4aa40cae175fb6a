"""Upstream SGLang 0.5.23's storage keys, against vectors its own functions produced
(tests/fixtures/sglang_0_5_23_keys.json; the command that made them is in the file and in
tests/sglang_side/make_vectors.py): hash chains with the namespace seed, Mooncake and file object names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache_ref.core.hashing import page_hashes
from hicache_ref.spec import StorageSpec
from hicache_ref.spec.fields import SpecError
from hicache_ref.storage.keys import namespace_seed, upstream_keys
from hicache_ref.storage.objects import ObjectFormat, file_names, mooncake_names

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "sglang_0_5_23_keys.json").read_text())


@pytest.mark.parametrize("case", VECTORS["chains"], ids=lambda c: f"p{c['page_size']}-{c['extra_key']}-{c['cache_salt']}")
def test_hash_chain_and_namespace_seed_match_upstream(case):
    salt = case["cache_salt"] or None  # upstream's RadixKey keeps an empty salt as none
    seed = namespace_seed(case["extra_key"], salt)
    assert (seed.hex() if seed else None) == case["seed"]
    assert upstream_keys(page_hashes(case["tokens"], case["page_size"], prior=seed)) == case["hashes"]


@pytest.mark.parametrize("case", VECTORS["mooncake"], ids=lambda c: f"{c['attention']}-{c['model']}")
def test_mooncake_object_names_match_upstream(case):
    fmt = ObjectFormat(scheme="sglang", attention=case["attention"], model=case["model"] or "",
                       tag=case["tag"] or "", tp_rank=case["tp_rank"], tp_size=case["tp_rank"] + 1)
    parts = 2 if case["attention"] == "mha" else 1
    assert [n for k in case["page_keys"] for n, _ in mooncake_names(fmt, k, parts)] == case["names"]


@pytest.mark.parametrize("case", VECTORS["file"], ids=lambda c: f"{c['attention']}-{c['model']}")
def test_file_object_names_match_upstream(case):
    fmt = ObjectFormat(scheme="sglang", attention=case["attention"], model=case["model"] or "",
                       tp_rank=case["tp_rank"], tp_size=case["tp_size"])
    [(name, parts)] = file_names(fmt, case["page_key"], 2 if case["attention"] == "mha" else 1)
    assert name + ".bin" == case["name"] and len(parts) == (2 if case["attention"] == "mha" else 1)


def test_storage_spec_resolves_the_key_scheme():
    spec = StorageSpec(l3="memory:")
    assert (spec.key_scheme, spec.object_layout, spec.trailer) == ("sglang", "page_first", "off")
    assert StorageSpec(l3="memory:", key_scheme="harness").object_layout is None
    with pytest.raises(SpecError, match="--l3-object-layout"):
        StorageSpec(l3="memory:", key_scheme="harness", object_layout="page_first")
    with pytest.raises(SpecError, match="--l3-extra-key"):
        StorageSpec(extra_key="lora")  # no L3


def test_a_file_name_never_leaves_the_directory():
    with pytest.raises(ValueError, match="keys"):
        file_names(ObjectFormat(scheme="sglang"), "../x", 1)
