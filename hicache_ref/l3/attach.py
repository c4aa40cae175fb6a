"""`attach_l3`: give a built HiCache an L3 tier on the store a spec string names.

The store is opened with hicache_ref.storage.registry.open_storage (`file:DIR`,
`mooncake:METADATA_URL,MASTER_ADDR`, or an entry-point backend) and keyed by
the spec's key scheme: upstream SGLang's objects (hicache_ref.storage.objects; the hash chain
seeded from the spec's extra_key / cache_salt as upstream seeds it), or the harness's, keyed by
hicache_ref.storage.keys.StorageIdentity of the cache's geometry so caches of different
geometries sharing one store never read each other's pages. For MHA a TP rank's slice is
its own shard of the key space; for MLA every rank holds the same latent KV, shares keys,
and only rank 0 writes.
"""

from __future__ import annotations

from hicache_ref.l3.prefetch_policy import L3Link
from hicache_ref.l3.tier import L3Tier
from hicache_ref.storage.keys import StorageIdentity, namespace_seed, upstream_keys
from hicache_ref.storage.objects import ObjectFormat
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
    fmt, key_fn = object_format(spec, geom, tp_rank, tp_size)
    if fmt.upstream:
        # upstream's RadixKey takes an empty cache_salt as none
        seed_chain(cache.tree, namespace_seed(spec.extra_key, spec.cache_salt or None))
    owns = storage is None
    if owns:
        try:
            storage = open_storage(spec.l3)
        except (ValueError, RuntimeError, OSError) as e:  # named for the caller: the option and spec, then why
            why = str(e)  # open_storage's messages already start with the spec: not twice
            raise StoreOpenError(why if spec.l3 in why else f"{spec.l3}: {why}") from e
        _refuse_below_a_page(storage, spec.l3, geom.token_bytes * geom.page_size)
    if hasattr(storage, "size_pages"):  # the model store: objects are this cache's pages, within --l3-tokens
        storage.size_pages(geom.page_size, geom.token_bytes * geom.page_size)
        storage.bound_tokens(getattr(spec, "l3_tokens", None))
    if link is None:  # the profile's l3_link where it has one (hardware_profiles), else the assumed link
        link = L3Link.from_profile(getattr(cache.backend, "profile", None), geom.token_bytes * geom.page_size)
    try:
        if hasattr(storage, "use_format"):
            storage.use_format(fmt)
        extra = {} if deadline_s is None else dict(deadline_s=deadline_s)
        if policy is not None:
            extra["policy"] = policy
        tier = L3Tier(storage, cache.tree, cache.host, geom, key_fn, spec, link=link, tp_rank=tp_rank,
                      owns_storage=owns, **extra)
    except BaseException:
        if owns:
            storage.close()
        raise
    cache.l3 = tier
    return tier


def _refuse_below_a_page(storage, name: str, page: int) -> None:
    """StoreOpenError (the store closed) when its bound cannot hold one page's object: every write
    would be refused and the run would say nothing of L3."""
    bound = getattr(storage, "max_bytes", None)
    if isinstance(bound, int) and bound < page:
        getattr(storage, "abandon", storage.close)()
        raise StoreOpenError(f"{name}: max_bytes={bound:,} cannot hold one page's object ({page:,} bytes: "
                             "--page-size tokens of every layer); give a larger bound")


def object_format(spec, geom, tp_rank: int = 0, tp_size: int = 1):
    """(ObjectFormat, page hashes -> keys) for the storage spec `spec` and the cache's geometry."""
    if getattr(spec, "key_scheme", "harness") == "harness":
        shard = f"tp{tp_rank}of{tp_size}" if geom.attention == "mha" and tp_size > 1 else ""
        return ObjectFormat(), StorageIdentity(geom, model=spec.l3_model or "", shard=shard).keys
    fmt = ObjectFormat(scheme="sglang", order=spec.object_layout, trailer=spec.trailer == "on",
                       model=spec.l3_model or "", tag=spec.l3_tag or "", attention=geom.attention,
                       tp_rank=tp_rank, tp_size=tp_size)
    return fmt, upstream_keys


def seed_chain(tree, seed: bytes | None) -> None:
    """Start the tree's page hash chain at `seed` (upstream's namespace seed; None: unseeded). Only
    before any node's hashes exist: the chain of every node below depends on it."""
    want = [seed] if seed is not None else []
    if tree.root.hashes == want:
        return
    if any(child.hashes is not None for child in tree.root.children.values()):
        raise ValueError("l3: the namespace seed must be set before any page is hashed")
    tree.root.hashes = want
