"""Upstream SGLang's own storage clients on one side of an interop test (runs in the sglang venv).

Reads a JSON job from argv[1]: builds upstream's host pool class of the job's attention over a
buffer of its layout (the class's own page addressing and page copies, no device pool), keys the
request's pages with upstream's own storage hash chain, and sets or gets them through upstream's
MooncakeStore or HiCacheFile. Prints one JSON line: the keys, per-page results and, for a get,
whether the pool's slots hold the request's pages (tests/sglang_side/kvfill.py); then waits for a
line on stdin before exiting, since a Mooncake client's objects live in its own mounted segment, and
closes the Mooncake client first, so that its segment is unmounted rather than left to the master.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
logging.disable(logging.WARNING)

import kvfill  # noqa: E402
import torch  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def host_pool(job, dtype):
    """Upstream's host pool object of the job's attention and layout over a filled buffer."""
    L, H, D, ps, pages = job["layers"], job["heads"], job["dim"], job["page_size"], job["pages"]
    size = pages * ps
    parts = [kvfill.fill(p, job["layout"], L, H, D, ps, job["slots"] if job["op"] == "set" else [], pages, dtype)
             for p in range(2 if job["attention"] == "mha" else 1)]
    if job["attention"] == "mha":
        from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost as cls
        pool = object.__new__(cls)
        pool.kv_buffer = torch.stack(parts)
        pool.head_num, pool.head_dim, pool.v_head_dim = H, D, D
    else:
        from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost as cls
        pool = object.__new__(cls)
        pool.kv_buffer = parts[0]
        pool.kv_cache_dim, pool.dcp_size = D, 1
        pool._size_per_token = L * D * dtype.itemsize
    pool.layout, pool.page_size, pool.layer_num, pool.size, pool.page_num = job["layout"], ps, L, size, pages
    pool.dtype, pool.device, pool.pin_memory = dtype, "cpu", False
    return pool, parts


def page_keys(job):
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.utils import get_storage_hash_str

    key = RadixKey(array("I", job["tokens"]), extra_key=job.get("extra_key"), cache_salt=job.get("cache_salt"))
    return get_storage_hash_str(key, None, page_size=job["page_size"])


def storage_config(job):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    extra = None
    if job["backend"] == "mooncake":
        extra = dict(master_server_address=job["master"], metadata_server=job["metadata"], protocol="tcp",
                     global_segment_size=64 << 20, local_hostname="127.0.0.1", check_server=False)
        if job.get("tag"):
            extra["extra_backend_tag"] = job["tag"]
    return HiCacheStorageConfig(tp_rank=job.get("tp_rank", 0), tp_size=job.get("tp_size", 1), pp_rank=0, pp_size=1,
                                attn_cp_rank=0, attn_cp_size=1, is_mla_model=job["attention"] == "mla",
                                enable_storage_metrics=False, is_page_first_layout=job["layout"] != "layer_first",
                                model_name=job.get("model"), extra_config=extra)


def run(job) -> tuple[dict, object]:
    dtype = DTYPES[job["dtype"]]
    pool, parts = host_pool(job, dtype)
    keys = page_keys(job)
    ps = job["page_size"]
    slots = torch.tensor([s * ps + t for s in job["slots"] for t in range(ps)], dtype=torch.int64)
    if job["backend"] == "mooncake":
        from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore

        store = MooncakeStore(storage_config(job))
        store.register_mem_pool_host(pool)
        if job["op"] == "set":
            ok = store.batch_set_v1(keys, slots)
        else:
            ok = store.batch_get_v1(keys, slots)
        present = store.batch_exists(keys)
    else:
        from sglang.srt.mem_cache.hicache_storage import HiCacheFile

        store = HiCacheFile(storage_config(job), file_path=job["dir"])
        ok = []
        for key, slot in zip(keys, job["slots"], strict=True):
            if job["op"] == "set":
                ok.append(bool(store.set(key, pool.get_data_page(slot * ps, flat=True))))
            else:
                page = store.get(key, pool.get_dummy_flat_data_page())
                if page is not None:
                    pool.set_from_flat_data_page(slot * ps, page)
                ok.append(page is not None)
        present = len([k for k in keys if store.exists(k)])
    out = dict(keys=keys, ok=[bool(x) for x in ok], present=int(present))
    if job["op"] == "get":
        bufs = [pool.kv_buffer[p] for p in range(len(parts))] if job["attention"] == "mha" else [pool.kv_buffer]
        out["match"] = all(kvfill.check(b, p, job["layout"], job["layers"], job["heads"], job["dim"], ps,
                                        job["slots"], job["pages"]) for p, b in enumerate(bufs))
    return out, store


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    result, client = run(job)
    print("RESULT " + json.dumps(result), flush=True)
    sys.stdin.readline()  # stay up until told: a Mooncake client's objects live in its own segment
    if job["backend"] == "mooncake":  # upstream's MooncakeStore.close() leaves its segment mounted
        client.store.close()
    os._exit(0)  # the Mooncake client's threads need not be joined
