"""`attach_l3`: give a built HiCache an L3 tier on the store a spec string names.

The store is opened with hicache_ref.storage.open_storage (`file:DIR`,
`mooncake:METADATA_URL,MASTER_ADDR`, or an entry-point backend) and keyed by
hicache_ref.storage.keys.StorageIdentity of the cache's geometry, so caches of different
geometries sharing one store never read each other's pages. For MHA a TP rank's slice is
its own shard of the key space; for MLA every rank holds the same latent KV, shares keys,
and only rank 0 writes.
"""

from __future__ import annotations

from hicache_ref.l3.tier import L3Tier
from hicache_ref.storage.keys import StorageIdentity
from hicache_ref.storage.registry import open_storage


def attach_l3(cache, storage_spec: str | None = None, *, storage=None, tp_rank: int = 0, tp_size: int = 1,
              **options) -> L3Tier:
    """Open `storage_spec` (or use the open `storage`, which the caller keeps) and attach an
    L3Tier (options: policy, threshold_tokens, limit_tokens, slack_seconds, link, deadline_s)
    to `cache` as `cache.l3`; returns it."""
    if cache.host is None:
        raise ValueError("l3: the cache has no L2 (l2_tokens 0); L3 prefetches into L2")
    if not cache.materialize:
        raise ValueError("l3: the cache is not materialized; L3 stores real KV bytes (materialize=True)")
    geom = cache.geom
    shard = f"tp{tp_rank}of{tp_size}" if geom.attention == "mha" and tp_size > 1 else ""
    identity = StorageIdentity(geom, shard=shard)
    owns = storage is None
    if owns:
        try:
            storage = open_storage(storage_spec)
        except (ValueError, RuntimeError, OSError) as e:  # named for the caller: the spec, then why
            why = str(e)  # open_storage's messages already start with the spec: not twice
            raise ValueError(f"l3: {why}" if storage_spec in why else f"l3: {storage_spec}: {why}") from e
    try:
        tier = L3Tier(storage, cache.tree, cache.host, geom, identity.keys, tp_rank=tp_rank, owns_storage=owns,
                      **options)
    except BaseException:
        if owns:
            storage.close()
        raise
    cache.l3 = tier
    return tier
