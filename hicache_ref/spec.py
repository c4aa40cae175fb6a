"""One spec object that describes a reference HiCache and builds it (like vLLM's OffloadingSpec).

`CacheSpec` holds everything a cache needs to be built: the KV geometry (attention,
layers, heads, kv_dim, dtype, page size), the tier capacities, write policy, ghost list,
free-list order, host layout, hardware profile, backend and whether pools hold real
bytes. Every field is checked once, when the spec is made (ValueError naming the field,
before anything is built); capacities that depend on a trace (None: unlimited, i.e. sized
to the whole trace) are resolved by `capacities`, and `build` returns the HiCache (tree,
pools and controller). The request-path switches (hit counting, backup scope, eviction
size, load_back minimum and quota) default to the reference's; `CacheSpec.preset("upstream")`
gives SGLang's (hicache_ref.semantics, hicache_ref/README.md). hicache_ref.sim.replay, the `hicache replay` / `bench replay` commands
and the tests all build caches from a spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hal.backend import get_backend
from hal.transfer.io_backend import IO_BACKENDS, effective_host_layout
from hal.transfer.layouts import DTYPES, HOST_LAYOUTS, MLA_LAYOUTS, KVGeometry, parse_dtype, positive_int
from hal.transfer.seed import SEED_GEOMETRY
from hicache_ref.core.allocator import ORDERS
from hicache_ref.core.cache import HiCache
from hicache_ref.core.ghost import GhostList
from hicache_ref.core.policy import HIT_COUNTS, POLICIES
from hicache_ref.core.radix import BACKUP_SCOPES
from hicache_ref.core.tiers import EVICT_SIZES
from hicache_ref.l3 import PREFETCH_POLICIES, attach_l3
from hicache_ref.l3.tier import DEFAULT_THRESHOLD_TOKENS
from hicache_ref.semantics import SEMANTICS, SWITCHES, overrides, preset

MATERIALIZE_LIMIT_BYTES = 16 << 30  # refuse pools larger than this: a typo should not eat the host
MIN_GHOST_ENTRIES = 1024  # the ghost list's default bound: L1 pages, at least this many

# Defaults: the P800 seed geometry (hal.transfer.seed, its one definition), so byte counts
# and modeled seconds are the ones that deployment would see.
_SEED_DTYPE_NAME = next(name for name, dt in DTYPES.items() if dt == SEED_GEOMETRY.dtype)


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return value


def _one_of(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name}: {value!r} is not one of {', '.join(choices)}")


def _tokens_or_none(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name}: expected a non-negative number of tokens, got {value!r}")


@dataclass(frozen=True)
class CacheSpec:
    """What to build: geometry, capacities (tokens; None: unlimited), policies, layout, backend."""

    page_size: int = SEED_GEOMETRY.page_size
    l1_tokens: int | None = None  # device (L1) capacity; None: the whole trace
    l2_tokens: int | None = None  # host (L2) capacity; 0: no L2; None: the whole trace
    write_policy: str = "write_through_selective"
    ghost: bool = False
    ghost_entries: int | None = None  # None: L1 pages, at least MIN_GHOST_ENTRIES
    free_list: str = "fifo"
    host_layout: str = "layer_first"
    attention: str = SEED_GEOMETRY.attention
    layers: int = SEED_GEOMETRY.layers
    heads: int = SEED_GEOMETRY.heads
    kv_dim: int = SEED_GEOMETRY.head_dim  # MLA latent width, or the head dim for MHA
    dtype: str = _SEED_DTYPE_NAME
    profile: str | None = "emu"  # hardware profile of the backend made when `backend` is None
    # A hal backend to run on, or None: one of `profile` made by open_backend (emu when
    # materialized, else count, which prices the same plans on the same clock and moves no bytes).
    backend: Any = None
    materialize: bool = False  # real KV pools and bytes, every hit checked
    # Request-path semantics (upstream vs the reference: hicache_ref/README.md, the differences table).
    # The defaults are the "reference" preset (hicache_ref.semantics); CacheSpec.preset fills them
    # from a preset, and `semantics` names the preset they came from (for the report).
    hit_count: str = "per_request"  # "per_insert": upstream's; see hicache_ref.core.policy
    pd_disagg: bool = False  # insert every request unfinished, then finished (PD-disaggregated prefill)
    backup_scope: str = "node"  # "node": upstream's write_backup; "path": the seed's (ancestors too)
    evict_size: str = "shortfall"  # "whole": upstream evicts the whole allocation when short
    load_back_threshold: int = 0  # tokens; a shorter host chain is recomputed (upstream: 10)
    load_back_quota: int | None = None  # tokens a load may take (upstream's mem_quota); None: no quota
    semantics: str = "reference"
    # -- upstream fidelity (issue 11): added together; the defaults keep earlier figures, except
    # that a page_first host pool is used as page_first_direct under direct, as upstream does --
    host_free_list: str | None = None  # the host (L2) pool's free-list order; None: free_list's
    # How host KV moves (hal.transfer.io_backend): "direct" prices merged segments (with
    # upstream's host-index sort for layer_first and page_first -> page_first_direct),
    # "kernel" prices launches and per-item copies.
    io_backend: str = "direct"
    # L3 (hicache_ref.l3): a storage spec such as file:DIR or mooncake:METADATA_URL,MASTER_ADDR
    # (hicache_ref.storage.open_storage), or None; needs an L2 and materialize (L3 holds real bytes).
    l3: str | None = None
    prefetch_policy: str = "wait_complete"  # hicache_ref.l3.policy: best_effort needs slack to fetch anything
    prefetch_threshold: int = DEFAULT_THRESHOLD_TOKENS  # fewer L3 tokens than this: no prefetch
    prefetch_limit_tokens: int | None = None  # rate limit, tokens in flight; None: 0.8 x L2
    prefetch_slack_seconds: float = 0.0  # modeled queue time before a request is scheduled (0: serial)

    def __post_init__(self):
        positive_int("page_size", self.page_size)
        _tokens_or_none("l1_tokens", self.l1_tokens)
        _tokens_or_none("l2_tokens", self.l2_tokens)
        if self.l1_tokens is not None and self.l1_tokens < self.page_size:
            raise ValueError(f"l1_tokens: {self.l1_tokens} holds no whole page of {self.page_size} tokens")
        _one_of("write_policy", self.write_policy, POLICIES)
        _flag("ghost", self.ghost)
        if self.ghost_entries is not None:
            positive_int("ghost_entries", self.ghost_entries)
        _one_of("free_list", self.free_list, ORDERS)
        if self.host_free_list is not None:
            _one_of("host_free_list", self.host_free_list, ORDERS)
        _one_of("io_backend", self.io_backend, IO_BACKENDS)
        _one_of("attention", self.attention, ("mla", "mha"))
        for name in ("layers", "heads", "kv_dim"):
            positive_int(name, getattr(self, name))
        parse_dtype(self.dtype)
        _one_of("host_layout", self.host_layout, MLA_LAYOUTS if self.attention == "mla" else HOST_LAYOUTS)
        _flag("materialize", self.materialize)
        _one_of("hit_count", self.hit_count, HIT_COUNTS)
        _flag("pd_disagg", self.pd_disagg)
        _one_of("backup_scope", self.backup_scope, BACKUP_SCOPES)
        _one_of("evict_size", self.evict_size, EVICT_SIZES)
        _tokens_or_none("load_back_threshold", self.load_back_threshold)
        if self.load_back_threshold is None:
            raise ValueError("load_back_threshold: expected a non-negative number of tokens, got None")
        _tokens_or_none("load_back_quota", self.load_back_quota)
        _one_of("semantics", self.semantics, SEMANTICS)
        if self.backend is not None and self.backend.capabilities().moves_bytes != self.materialize:
            raise ValueError(f"backend: {self.backend.name!r} {'moves' if not self.materialize else 'moves no'} "
                             f"bytes, but materialize={self.materialize} (unmaterialized caches run on a backend "
                             "that moves none, such as count)")
        self.geometry()  # what KVGeometry itself checks (e.g. MLA has one head)
        self._check_l3()

    def _check_l3(self) -> None:
        if self.l3 is not None:
            if not isinstance(self.l3, str) or ":" not in self.l3:
                raise ValueError(f"l3: expected a storage spec NAME:ARGS such as file:/tmp/kv, got {self.l3!r}")
            if not self.materialize:
                raise ValueError("l3: needs materialize=True (L3 stores and returns real KV bytes)")
            if self.l2_tokens == 0:
                raise ValueError("l3: needs an L2 (l2_tokens 0): L3 prefetches into L2")
        _one_of("prefetch_policy", self.prefetch_policy, PREFETCH_POLICIES)
        _tokens_or_none("prefetch_threshold", self.prefetch_threshold)
        if self.prefetch_threshold is None:
            raise ValueError("prefetch_threshold: expected a non-negative number of tokens, got None")
        _tokens_or_none("prefetch_limit_tokens", self.prefetch_limit_tokens)
        s = self.prefetch_slack_seconds
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s < float("inf"):
            raise ValueError(f"prefetch_slack_seconds: expected non-negative seconds, got {s!r}")

    @classmethod
    def preset(cls, semantics: str = "reference", **fields) -> CacheSpec:
        """A spec whose request-path switches come from preset `semantics` ("upstream":
        SGLang's decisions), any of them given in `fields` overriding it."""
        return cls(**{**preset(semantics), **fields, "semantics": semantics})

    def semantics_config(self) -> dict:
        """The resolved switches as the figures report them, and those that differ from the preset."""
        values = {k: getattr(self, k) for k in SWITCHES}
        # The host order is compared as given (None: free_list's) and reported resolved.
        return dict(semantics=self.semantics, **{**values, "host_free_list": self.resolved_host_free_list},
                    load_back_quota=self.load_back_quota, semantics_overrides=overrides(self.semantics, values))

    def geometry(self) -> KVGeometry:
        """The KV geometry this spec describes."""
        return KVGeometry(self.attention, self.layers, self.heads, self.kv_dim, parse_dtype(self.dtype),
                          self.page_size)

    def geometry_config(self) -> dict:
        """The geometry as the figures report it (the names and values given)."""
        return dict(attention=self.attention, layers=self.layers, heads=self.heads, kv_dim=self.kv_dim,
                    dtype=self.dtype)

    def capacities(self, whole_tokens: int = 0) -> tuple[int, int]:
        """(L1, L2) in tokens, rounded down to whole pages; an unlimited tier holds `whole_tokens`
        (at least one page). ValueError if materialized pools would exceed MATERIALIZE_LIMIT_BYTES."""
        ps = self.page_size
        unlimited = max(whole_tokens, ps)
        l1, l2 = (unlimited if t is None else t // ps * ps for t in (self.l1_tokens, self.l2_tokens))
        token_bytes = self.geometry().token_bytes
        if self.materialize and (l1 + l2) * token_bytes > MATERIALIZE_LIMIT_BYTES:
            raise ValueError(f"materialize: pools of {(l1 + l2) * token_bytes / 2**30:.1f} GiB exceed "
                             f"{MATERIALIZE_LIMIT_BYTES >> 30} GiB; give l1/l2 capacities, a limit, or a smaller "
                             "geometry")
        return l1, l2

    @property
    def sync(self) -> bool:
        """Apply completions before each request: whenever eviction is possible (finite capacity,
        or real bytes), so figures do not depend on thread timing."""
        return self.materialize or self.l1_tokens is not None or self.l2_tokens is not None

    @property
    def effective_host_layout(self) -> str:
        """The host layout the pool uses: host_layout, page_first -> page_first_direct with direct."""
        return effective_host_layout(self.host_layout, self.io_backend)

    @property
    def resolved_host_free_list(self) -> str:
        """The host pool's free-list order: host_free_list, or free_list when that is None."""
        return self.free_list if self.host_free_list is None else self.host_free_list

    def open_backend(self) -> tuple[Any, bool]:
        """(backend, owned): the spec's backend, or a new one of `profile` that the caller closes:
        emu when materialized, else count (no bytes, the same modeled seconds)."""
        if self.backend is not None:
            return self.backend, False
        return get_backend("emu" if self.materialize else "count", self.profile), True

    def build(self, backend, whole_tokens: int = 0, page_keys: str = "tokens") -> HiCache:
        """The HiCache this spec describes on `backend` (see capacities for `whole_tokens`); the
        backend moves bytes exactly when the spec is materialized. `page_keys`: how its tree
        spells pages (hicache_ref.core.page_keys; the same tree either way)."""
        if backend.capabilities().moves_bytes != self.materialize:
            raise ValueError(f"backend: {backend.name!r} does not match materialize={self.materialize} "
                             "(open_backend picks one that does)")
        l1, l2 = self.capacities(whole_tokens)
        bound = self.ghost_entries if self.ghost_entries is not None else max(l1 // self.page_size, MIN_GHOST_ENTRIES)
        cache = HiCache(self.geometry(), l1, l2, backend, layout=self.host_layout, policy=self.write_policy,
                        ghost=GhostList(bound) if self.ghost else None, order=self.free_list, sync=self.sync,
                        hit_count=self.hit_count, pd_disagg=self.pd_disagg, backup_scope=self.backup_scope,
                        evict_size=self.evict_size, load_back_threshold=self.load_back_threshold,
                        load_back_quota=self.load_back_quota, host_order=self.resolved_host_free_list,
                        io_backend=self.io_backend, page_keys=page_keys)
        if self.l3 is not None:
            try:
                attach_l3(cache, self.l3, policy=self.prefetch_policy, threshold_tokens=self.prefetch_threshold,
                          limit_tokens=self.prefetch_limit_tokens, slack_seconds=self.prefetch_slack_seconds)
            except BaseException:
                cache.close()
                raise
        return cache
