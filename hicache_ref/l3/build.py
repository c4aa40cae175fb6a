"""`attach_l3`: give a built HiCache an L3 tier on the store a spec string names.

The store is opened with hicache_ref.storage.open_storage (`file:DIR`,
`mooncake:METADATA_URL,MASTER_ADDR`, or an entry-point backend) and keyed by
hicache_ref.storage.keys.StorageIdentity of the cache's geometry, so caches of different
geometries sharing one store never read each other's pages. For MHA a TP rank's slice is
its own shard of the key space; for MLA every rank holds the same latent KV, shares keys,
and only rank 0 writes.
"""

from __future__ import annotations

from hicache_ref.l3.policy import L3Link
from hicache_ref.l3.tier import L3Tier
from hicache_ref.storage.keys import StorageIdentity
from hicache_ref.storage.registry import open_storage


class StoreOpenError(ValueError):
    """The L3 store a spec names could not be opened (the message names the spec, then why)."""


def attach_l3(cache, spec, *, storage=None, tp_rank: int = 0, tp_size: int = 1, link=None,
              deadline_s: float | None = None, policy=None) -> L3Tier:
    """Open the store `spec` (a hicache_ref.spec.StorageSpec, checked: the cache has an L2 and real
    bytes) names, or use the open `storage`, which the caller keeps, and attach an L3Tier with
    its prefetch policy (or `policy`, a PrefetchPolicy object with its own parameters) to `cache`
    as `cache.l3`; returns it."""
    geom = cache.geom
    shard = f"tp{tp_rank}of{tp_size}" if geom.attention == "mha" and tp_size > 1 else ""
    identity = StorageIdentity(geom, shard=shard)
    owns = storage is None
    if owns:
        try:
            storage = open_storage(spec.l3)
        except (ValueError, RuntimeError, OSError) as e:  # named for the caller: the option and spec, then why
            why = str(e)  # open_storage's messages already start with the spec: not twice
            raise StoreOpenError(why if spec.l3 in why else f"{spec.l3}: {why}") from e
    if hasattr(storage, "size_pages"):  # the model store: objects are this cache's pages, within --l3-tokens
        storage.size_pages(geom.page_size, geom.token_bytes * geom.page_size)
        storage.bound_tokens(getattr(spec, "l3_tokens", None))
    if link is None:  # the profile's l3_link where it has one (hardware_profiles), else the assumed link
        link = L3Link.from_profile(getattr(cache.backend, "profile", None), geom.token_bytes * geom.page_size)
    try:
        extra = {} if deadline_s is None else dict(deadline_s=deadline_s)
        if policy is not None:
            extra["policy"] = policy
        tier = L3Tier(storage, cache.tree, cache.host, geom, identity.keys, spec, link=link, tp_rank=tp_rank,
                      owns_storage=owns, **extra)
    except BaseException:
        if owns:
            storage.close()
        raise
    cache.l3 = tier
    return tier
