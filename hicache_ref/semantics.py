"""Request-path semantics presets: SGLang's (upstream) decisions, or the reference's, switch by switch.

Each switch is a CacheSpec field; a preset gives every switch a value, and fields given
explicitly override it (CacheSpec.preset). What each switch changes, and its effect on the
conversation-trace slice, is the differences table in hicache_ref/README.md.

- hit_count: per_insert (upstream HiRadixCache.inc_hit_count) / per_request (the fix);
  hicache_ref.core.policy.
- backup_scope: node (upstream write_backup: skip a node whose parent has no host copy) /
  path (the seed: back up the ancestors too); hicache_ref.core.radix. Both presets use node,
  upstream's, which the reference adopted as its default.
- evict_size: whole (upstream: evict as much as the allocation asks) / shortfall (only
  what is missing); hicache_ref.core.tiers.
- load_back_threshold: 10 tokens (HiRadixCache.load_back_threshold) / 0. With pages of
  10 tokens or more it never refuses a load (a host chain is whole pages).
- free_list / host_free_list: upstream's device allocator (upstream_l1: freed pages sorted
  to the front) and host pool (upstream_host: appended at the back), from
  hicache_ref.core.allocator.UPSTREAM_ORDERS / fifo for both (host_free_list None: free_list's).
- io_backend: kernel (upstream's server default, --hicache-io-backend) / direct (one copy
  per merged run; the pricing the reference's figures have always used); hal.transfer.io_backend.

Not in the presets: the write policy (a deployment choice; upstream's server default is
write_through, the reference's write_through_selective), load_back_quota (upstream's
scheduler passes none today) and pd_disagg (a deployment mode).
"""

from __future__ import annotations

from hicache_ref.core.allocator import UPSTREAM_ORDERS

SEMANTICS = ("reference", "upstream")

PRESETS: dict[str, dict] = {
    "reference": dict(hit_count="per_request", backup_scope="node", evict_size="shortfall", load_back_threshold=0,
                      free_list="fifo", host_free_list=None, io_backend="direct"),
    "upstream": dict(hit_count="per_insert", backup_scope="node", evict_size="whole", load_back_threshold=10,
                     free_list=UPSTREAM_ORDERS["device"], host_free_list=UPSTREAM_ORDERS["host"],
                     io_backend="kernel"),
}
SWITCHES = tuple(PRESETS["reference"])


def preset(name: str) -> dict:
    """The switches' values under semantics `name` (ValueError naming `semantics` if unknown)."""
    if name not in PRESETS:
        raise ValueError(f"semantics: {name!r} is not one of {', '.join(SEMANTICS)}")
    return dict(PRESETS[name])


def overrides(name: str, values: dict) -> list[str]:
    """The switches whose value in `values` differs from preset `name`, in SWITCHES order."""
    base = preset(name)
    return [k for k in SWITCHES if values[k] != base[k]]
