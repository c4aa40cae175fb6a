"""Fixed vectors of upstream SGLang 0.5.23's storage keys, produced by its own functions.

Run in the sglang environment from the repository root:
    /work/sgvenv/bin/python tests/sglang_side/make_vectors.py > tests/fixtures/sglang_0_5_23_keys.json
(any interpreter with sglang==0.5.23 importable). The vectors: page hash chains of fixed token runs
(get_hash_str / get_storage_hash_str with extra_key and cache_salt), the namespace seeds, and the
object names MooncakeStore and HiCacheFile give a page (their own naming code, over a host pool of
upstream's class: upstream_peer.host_pool).
"""

from __future__ import annotations

import json
import os
import sys
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import logging  # noqa: E402

logging.disable(logging.WARNING)

import torch  # noqa: E402
import upstream_peer  # noqa: E402


def chains():
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.utils import get_storage_hash_str, storage_namespace_seed

    out = []
    for tokens, ps, extra_key, cache_salt in (
        (list(range(8)), 4, None, None),
        (list(range(1000, 1012)), 4, "lora-a", None),
        (list(range(1000, 1012)), 4, None, "salt"),
        (list(range(1000, 1012)), 4, "", "s"),
        ([2**32 - 1, 0, 7, 65536] * 4, 8, "é", None),
        (list(range(70000, 70128)), 64, None, None),
    ):
        key = RadixKey(array("I", tokens), extra_key=extra_key, cache_salt=cache_salt)
        out.append(dict(tokens=tokens, page_size=ps, extra_key=extra_key, cache_salt=cache_salt,
                        seed=storage_namespace_seed(extra_key, cache_salt),
                        hashes=get_storage_hash_str(key, None, page_size=ps)))
    return out


def mooncake_names():
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore

    out = []
    for attention, model, tag, tp_rank in (("mla", None, None, 0), ("mla", "org/m-7b", "t1", 3),
                                           ("mha", None, None, 0), ("mha", "org/m-7b", "t1", 1)):
        job = dict(attention=attention, layout="page_first", layers=2, heads=1, dim=4, page_size=2, pages=2,
                   slots=[], op="get")
        pool, _ = upstream_peer.host_pool(job, torch.bfloat16)
        store = object.__new__(MooncakeStore)
        parts = [p for p in (tag, "-".join(model.split("/")) if model else None) if p]
        store.config_prefix = "_".join(parts) if parts else None
        store.is_mla_backend, store.should_split_heads, store.dcp_size = attention == "mla", False, 1
        store.mla_suffix, store.mha_suffix, store.mem_pool_host = "", str(tp_rank), pool
        page_keys = ["aa" * 32, "bb" * 32]
        names, _, _ = store._batch_preprocess(store._tag_keys(page_keys), torch.arange(4))
        out.append(dict(attention=attention, model=model, tag=tag, tp_rank=tp_rank, page_keys=page_keys,
                        names=names))
    return out


def file_names(tmp: str):
    from sglang.srt.mem_cache.hicache_storage import HiCacheFile

    out = []
    for attention, model, tp_rank, tp_size in (("mla", None, 0, 1), ("mla", "org/m-7b", 1, 2),
                                               ("mha", "org/m-7b", 1, 2)):
        job = dict(backend="file", attention=attention, layout="page_first", model=model, tp_rank=tp_rank,
                   tp_size=tp_size, dir=tmp)
        store = HiCacheFile(upstream_peer.storage_config(job), file_path=tmp)
        out.append(dict(attention=attention, model=model, tp_rank=tp_rank, tp_size=tp_size, page_key="cc" * 32,
                        name=store._get_suffixed_key("cc" * 32) + ".bin"))
    return out


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        doc = dict(sglang="0.5.23", command="python tests/sglang_side/make_vectors.py", chains=chains(),
                   mooncake=mooncake_names(), file=file_names(tmp))
    print(json.dumps(doc, indent=1))
    sys.stdout.flush()
    os._exit(0)
