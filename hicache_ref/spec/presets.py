"""Request-path semantics presets, looked up by name: an SGLang release's decisions, or the reference's.

A preset gives every switch a value; a switch given explicitly overrides it. `seed` is the SGLang
HiRadixCache the seed write-up tuned; `sglang-0.5.23` is that release, read from its source. Taking
on a later release is one more `register_preset` call (and a switch where its behaviour is new).
Each switch names the upstream file and function it mirrors; hicache_ref.spec.presets_table
renders them as the differences table in hicache_ref/README.md.
"""

from __future__ import annotations

from typing import NamedTuple

from hicache_ref.core.allocator import UPSTREAM_ORDERS
from hicache_ref.l3.prefetch_policy import DEFAULT_PREFETCH_POLICY


class Switch(NamedTuple):
    """One request-path decision: its option, what it decides, and where SGLang 0.5.23 decides it."""

    name: str
    option: str
    what: str
    source: str  # upstream file: function (SGLang 0.5.23, python/sglang/srt/)


_MC = "mem_cache/"
SWITCH_TABLE = (
    Switch("hit_count", "--hit-count", "which inserts count a hit",
           f"{_MC}unified_cache/unified_tree_core.py: _finish_insert_walk_node, _inc_hit_count_and_check"),
    Switch("backup_scope", "--backup-scope", "which nodes a due backup takes",
           f"{_MC}unified_cache/unified_tree_core.py: _build_backup_kv_action"),
    Switch("backup_alloc", "--backup-alloc", "how a backup of several nodes takes host slots",
           f"{_MC}unified_radix_cache.py: _execute_and_commit_kv_backup, _execute_kv_backup"),
    Switch("evict_size", "--evict-size", "how much a short tier evicts",
           f"{_MC}allocator/base.py: evict_to_free_tokens; allocation.py: alloc_paged_token_slots_extend, alloc_token_slots"),
    Switch("host_reclaim", "--host-reclaim", "what L2 eviction frees first under write_back",
           f"{_MC}unified_cache/unified_tree_core.py: drive_host_eviction, _reclaim_full_host_duplicates"),
    Switch("load_back_threshold", "--load-back-threshold", "shortest host prefix loaded back (tokens)",
           f"{_MC}unified_radix_cache.py: load_back (load_back_threshold)"),
    Switch("free_list", "--free-list", "device free-list order",
           f"{_MC}allocator/paged.py: _release_page_ids; kv_cache_configurator.py (need_sort under PD)"),
    Switch("host_free_list", "--host-free-list", "host free-list order",
           f"{_MC}memory_pool_host.py: HostKVCache.free / alloc"),
    Switch("io_backend", "--io-backend", "how host KV moves", "arg_groups/fields/memory.py: hicache_io_backend"),
    Switch("host_layout", "--host-layout", "host KV layout", "arg_groups/fields/memory.py: hicache_mem_layout"),
    Switch("io_resolution", "--io-resolution", "how a layout and io backend that do not fit are resolved",
           "arg_groups/hicache_hook.py: resolve_layout_io_compatibility; pool_host/mha.py (page_head)"),
    Switch("host_sizing", "--host-sizing", "an L2 sized no larger than L1",
           f"{_MC}memory_pool_host.py: HostKVCache.__init__ (host larger than device)"),
    Switch("prefetch_policy", "--prefetch-policy", "with --l3: when a request stops waiting for its prefetch",
           "arg_groups/fields/memory.py: hicache_storage_prefetch_policy"),
    Switch("prefetch_timeout_start", "--prefetch-timeout-start", "with --l3: where the timeout's budget starts",
           f"{_MC}unified_radix_cache.py: _start_storage_prefetch_wait, _prefetch_deadline_expired"),
    Switch("prefetch_limit_rule", "--prefetch-limit-rule", "with --l3: the prefetch rate limit",
           "managers/cache_controller.py: prefetch_rate_limited (prefetch_capacity_limit)"),
    Switch("prefetch_anchor", "--prefetch-anchor", "with --l3: which matched prefixes a prefetch may extend",
           "managers/scheduler.py: _prefetch_kvcache (is_backuped / is_root)"),
)
# apply with an L3 only
STORAGE_SWITCHES = ("prefetch_policy", "prefetch_timeout_start", "prefetch_limit_rule", "prefetch_anchor")
SWITCHES = tuple(s.name for s in SWITCH_TABLE)
PRESETS: dict[str, dict] = {}
PD_PRESETS: dict[str, dict] = {}  # switches a preset sets differently under PD disaggregation
DEFAULT_PRESET = "reference"


def register_preset(name: str, pd: dict | None = None, **switches) -> None:
    """Add preset `name`; it must give every switch (SWITCHES). `pd`: switches whose value differs
    under --pd-disagg (as 0.5.23 sorts its device free list in PD mode)."""
    if set(switches) != set(SWITCHES):
        raise ValueError(f"preset {name!r}: gives {sorted(switches)}, expected every switch of {SWITCHES}")
    if pd and not set(pd) <= set(SWITCHES):
        raise ValueError(f"preset {name!r}: pd gives {sorted(set(pd) - set(SWITCHES))}, not switches")
    PRESETS[name] = dict(switches)
    PD_PRESETS[name] = dict(pd or {})


register_preset("reference", hit_count="per_request", backup_scope="node", backup_alloc="whole_chain",
                evict_size="shortfall", host_reclaim="leaves", load_back_threshold=0, free_list="fifo",
                host_free_list=None, host_layout="layer_first", io_backend="direct", io_resolution="as_given",
                host_sizing="refuse", prefetch_policy=DEFAULT_PREFETCH_POLICY, prefetch_timeout_start="issue",
                prefetch_limit_rule="cut", prefetch_anchor="any")
# The HiRadixCache the seed tuned (mem_cache/hiradix_cache.py): every insert counts, so the double
# insert under PD disaggregation degrades write_through_selective into write_through.
register_preset("seed", hit_count="per_insert", backup_scope="node", backup_alloc="whole_chain", evict_size="whole",
                host_reclaim="leaves", load_back_threshold=10, free_list=UPSTREAM_ORDERS["device"],
                host_free_list=UPSTREAM_ORDERS["host"], host_layout="layer_first", io_backend="kernel",
                io_resolution="as_given", host_sizing="refuse", prefetch_policy=DEFAULT_PREFETCH_POLICY,
                prefetch_timeout_start="issue", prefetch_limit_rule="cut", prefetch_anchor="any")
register_preset("sglang-0.5.23", pd=dict(free_list="upstream_l1_sorted"), hit_count="per_request_insert",
                backup_scope="path", backup_alloc="per_node", evict_size="demand_shortfall", host_reclaim="duplicates_first",
                load_back_threshold=10, free_list="lifo", host_free_list=UPSTREAM_ORDERS["host"],
                host_layout="page_first", io_backend="kernel", io_resolution="sglang", host_sizing="warn",
                prefetch_policy="timeout", prefetch_timeout_start="first_blocked_poll", prefetch_limit_rule="decline",
                prefetch_anchor="backed_up")


def preset_names() -> tuple[str, ...]:
    return tuple(PRESETS)


def preset(name: str, pd_disagg: bool = False) -> dict:
    """The switches' values under preset `name` (KeyError if unknown: the spec names the option),
    with its PD values when `pd_disagg`."""
    out = dict(PRESETS[name])
    if pd_disagg:
        out.update(PD_PRESETS[name])
    return out
