"""Every spec field on the reference engine: the spec is the reference's own, so each is honoured.

Declared one by one all the same, so that a new field is a decision for every engine
(tests/engines/test_engine_support.py) and not a default nobody looked at.
"""

from __future__ import annotations

from hicache_ref.spec.engine_support import Honoured


def _honoured(node: str, *names: str) -> dict:
    return {f"{node}.{n}" if node else n: Honoured("hicache_ref's cache") for n in names}


SUPPORT = {
    **_honoured("geometry", "attention", "layers", "heads", "kv_dim", "dtype", "page_size", "model"),
    **_honoured("tiers", "l1_tokens", "l2_tokens", "hicache_ratio", "hicache_size", "write_policy", "ghost",
                "ghost_entries", "free_list", "host_free_list", "host_layout", "io_backend", "materialize",
                "mem_fraction_static"),
    **_honoured("semantics", "preset", "hit_count", "backup_scope", "backup_alloc", "evict_size", "host_reclaim",
                "io_resolution", "host_sizing", "load_back_threshold", "load_back_quota"),
    **_honoured("storage", "l3", "l3_tokens", "prefetch_policy", "prefetch_timeout_start", "prefetch_limit_rule",
                "prefetch_anchor", "prefetch_threshold", "prefetch_limit_tokens", "prefetch_slack_seconds",
                "key_scheme", "l3_model", "l3_tag", "object_layout", "trailer", "extra_key", "cache_salt"),
    **_honoured("serving", "concurrency", "timestamps", "pd_disagg", "step_ms"),
    **_honoured("tp", "ranks", "shared_host"),
    **_honoured("", "profile"),
}
