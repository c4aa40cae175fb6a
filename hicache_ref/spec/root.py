"""The root spec: the nodes (geometry, tiers, semantics, storage, serving, tp) plus the profile.

Every cross-field rule lives here and runs once, when the spec is made, before anything is
built: each refusal is a SpecError naming the option. Construction also resolves what depends on
several nodes: the preset's switches (and which were overridden), L2 sized upstream-style, the
prefetch defaults, the effective host layout. `CacheSpec.of(**fields)` routes flat field names
to their nodes; `build` makes the HiCache.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any

from hal.backend import get_backend
from hal.transfer.io_backend import effective_host_layout
from hal.transfer.layouts import get_layout, layout_names
from hicache_ref.spec import sizing
from hicache_ref.spec.fields import ALL_COMMANDS, SpecError, fail, param
from hicache_ref.spec.geometry import GeometrySpec, unaligned_rows
from hicache_ref.spec.presets import STORAGE_SWITCHES, SWITCHES, preset
from hicache_ref.spec.semantics import SemanticsSpec
from hicache_ref.spec.serving import ServingSpec
from hicache_ref.spec.storage import StorageSpec, is_model_store
from hicache_ref.spec.tiers import MIN_GHOST_ENTRIES, TiersSpec
from hicache_ref.spec.tp import TPSpec


class SizingWarning(UserWarning):
    """An L2 sized no larger than L1, accepted because host_sizing is warn."""


MATERIALIZE_LIMIT_BYTES = 16 << 30  # refuse pools larger than this: a typo should not eat the host
NODES = dict(geometry=GeometrySpec, tiers=TiersSpec, semantics=SemanticsSpec, storage=StorageSpec,
             serving=ServingSpec, tp=TPSpec)
_TIER_SWITCHES = ("free_list", "host_free_list", "host_layout", "io_backend")  # preset switches on the tiers node
_ALIASES = {"semantics": ("semantics", "preset"), "tp": ("tp", "ranks")}  # flat names that differ from the field


def _node_of(name: str) -> tuple[str, str]:
    if name in _ALIASES:
        return _ALIASES[name]
    for node, cls in NODES.items():
        if name in {f.name for f in dataclasses.fields(cls)}:
            return node, name
    raise TypeError(f"CacheSpec: no field {name!r}")


def _route(fields: dict) -> tuple[dict, dict[str, dict]]:
    """(root fields, {node: its fields}) from flat names."""
    fields = dict(fields)
    root = {k: fields.pop(k) for k in ("profile", "backend") if k in fields}
    nodes: dict[str, dict] = {}
    for name, value in fields.items():
        node, f = _node_of(name)
        nodes.setdefault(node, {})[f] = value
    return root, nodes


@dataclass(frozen=True)
class CacheSpec:
    """What to build and run: one frozen tree, checked and resolved when made."""

    PATH = "spec"
    geometry: GeometrySpec = field(default_factory=GeometrySpec)
    tiers: TiersSpec = field(default_factory=TiersSpec)
    semantics: SemanticsSpec = field(default_factory=SemanticsSpec)
    storage: StorageSpec = field(default_factory=StorageSpec)
    serving: ServingSpec = field(default_factory=ServingSpec)
    tp: TPSpec = field(default_factory=TPSpec)
    profile: str = param("p800", "--profile", "hardware profile for the modeled clock (name or YAML path)",
                         commands=ALL_COMMANDS | {"bench transfer", "bench l3_hits"})
    # A hal backend to run on, or None: one of `profile` made by open_backend (emu when
    # materialized, else count, which prices the same plans and moves no bytes). Not an option.
    backend: Any = field(default=None, compare=False)
    # Resolved at construction (not given): the host layout the pool uses, and upstream sizing's report.
    effective_host_layout: str = field(default="", init=False)
    host_sizing: dict | None = field(default=None, init=False, compare=False)
    machine_sizing: dict | None = field(default=None, init=False, compare=False)  # what --model resolved

    def __post_init__(self):
        for name, cls in NODES.items():
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"CacheSpec.{name}: expected a {cls.__name__}, got {type(getattr(self, name)).__name__}")
        g, t, st = self.geometry, self.tiers, self.storage
        if not isinstance(self.profile, str) or not self.profile:
            raise fail(self, "profile", f"expected a profile name or YAML path, got {self.profile!r}")
        self._resolve_machine()
        self._check_capacities()
        self._resolve_semantics()
        t = self.tiers
        if g.attention == "mla" and t.host_layout not in (mla := layout_names("mla")):
            raise fail(t, "host_layout", f"{t.host_layout!r} is not an MLA host layout ({', '.join(mla)})")
        self._resolve_io()
        t = self.tiers
        object.__setattr__(self, "effective_host_layout", effective_host_layout(t.host_layout, t.io_backend))
        if st.l3 is not None:
            model = is_model_store(st.l3)  # keys and sizes only: no bytes, served replays too
            if not t.materialize and not model:
                raise fail(st, "l3", "needs --materialize (L3 stores and returns real KV bytes), or --l3 model:")
            if model and t.materialize:
                raise fail(st, "l3", "model: moves no bytes; drop --materialize or give a real store")
            if t.l2_tokens == 0:
                raise fail(st, "l3", "needs an L2 to prefetch into; --l2-tokens is 0")
            if self.tp.ranks is not None or (self.serving.concurrency is not None and not model):
                raise fail(st, "l3", "applies to a serial single-rank replay; drop "
                           + ("--tp" if self.tp.ranks is not None else "--concurrency"))
        if t.materialize and (why := unaligned_rows(g)):
            raise fail(g, "kv_dim", f"{why}; --materialize copies real rows (a priced replay takes any width)")
        if self.backend is not None and self.backend.capabilities().moves_bytes != t.materialize:
            raise fail(t, "materialize", f"backend {self.backend.name!r} "
                       f"{'moves' if not t.materialize else 'moves no'} bytes, but materialize={t.materialize} "
                       "(unmaterialized caches run on a backend that moves none, such as count)")

    # -- resolution -------------------------------------------------------------------------
    def _resolve_machine(self) -> None:
        """--model: the geometry of one rank and, without --l1-tokens, L1 from the profile's HBM
        (hicache_ref.spec.machine). Resolved once: the model and share are cleared, the geometry and
        L1 hold the result, `machine_sizing` the arithmetic."""
        g, t = self.geometry, self.tiers
        if g.model is None:  # without a model the share sizes nothing: never taken and dropped unsaid
            if t.mem_fraction_static is not None:
                raise fail(t, "mem_fraction_static", "sizes L1 from a model's weights and KV bytes: give --model"
                           + (" (with --l1-tokens alone it is not used)" if t.l1_tokens is not None else ""))
            return
        if t.mem_fraction_static is not None and t.l1_tokens is not None:  # the share would size nothing
            raise fail(t, "mem_fraction_static", "sizes L1 from the card's memory, but --l1-tokens gives L1: "
                       "give one of them")
        from hicache_ref.models.catalog import load_model
        from hicache_ref.spec import machine

        try:
            model = load_model(g.model)
        except ValueError as e:
            raise fail(g, "model", str(e).removeprefix("--model: ")) from None
        default = GeometrySpec()
        clash = [f.metadata["option"] for f in dataclasses.fields(GeometrySpec)
                 if f.name in ("attention", "layers", "heads", "kv_dim", "dtype")
                 and getattr(g, f.name) != getattr(default, f.name)]
        if clash:
            raise fail(g, "model", f"sets the KV geometry itself; drop {', '.join(clash)}")
        profile = None
        if t.l1_tokens is None or self.tp.ranks is None:
            from hardware_profiles import load_profile

            try:
                profile = load_profile(self.profile)
            except ValueError as e:
                raise fail(self, "profile", str(e)) from None
        try:
            sized = machine.resolve(model, profile, self.tp.ranks, t.l1_tokens, t.mem_fraction_static, g.page_size)
        except ValueError as e:  # the model's own gap names --model; a TP it cannot split over, --tp;
            # a size that does not fit, --l1-tokens
            node, name = (g, "model") if str(e).startswith("model ") else (self.tp, "ranks") \
                if str(e).startswith("tp: ") else (t, "l1_tokens")
            raise fail(node, name, str(e).removeprefix("tp: ")) from None
        object.__setattr__(self, "geometry", dataclasses.replace(g, model=None, **sized.geometry))
        l1 = t.l1_tokens if sized.l1_tokens is None else sized.l1_tokens
        object.__setattr__(self, "tiers", dataclasses.replace(t, l1_tokens=l1, mem_fraction_static=None))
        object.__setattr__(self, "machine_sizing", sized.to_json())

    def _check_capacities(self) -> None:
        t, ps = self.tiers, self.geometry.page_size
        for name in ("l1_tokens", "l2_tokens"):
            v = getattr(t, name)
            if v is not None and 0 < v < ps:
                raise fail(t, name, f"{v:,} tokens hold no whole page of --page-size {ps}"
                           + ("; give 0 for no L2" if name == "l2_tokens" else ""))
        option = t.sizing_option()
        if option is None:
            return
        if t.l2_tokens is not None:
            raise fail(t, option, "sizes L2, and so does --l2-tokens; give one of the two")
        if t.l1_tokens is None:
            raise fail(t, option, "sizes L2 against the device pool: give --l1-tokens")
        token_bytes = self.geometry.token_bytes
        device = t.l1_tokens // ps * ps
        host = sizing.host_tokens(device, ps, token_bytes, ratio=t.hicache_ratio, size_gb=t.hicache_size)
        larger = "passed"
        try:
            sizing.check_host_larger(host, device)
        except ValueError as e:
            if self._switch("host_sizing") != "warn":
                raise fail(t, option, str(e)) from None
            # SGLang 0.5.23 (memory_pool_host.py HostKVCache.__init__) only warns and goes on.
            warnings.warn(f"--{option.replace('_', '-')}: {e}", SizingWarning, stacklevel=3)
            larger = f"warned: {e}"
        report = dict(hicache_ratio=t.hicache_ratio, hicache_size_gb=t.hicache_size, device_tokens=device,
                      host_tokens=host, host_bytes=host * token_bytes, token_bytes=token_bytes,
                      host_larger_check=larger)
        if t.materialize:  # only real pools take host memory
            available = sizing.mem_available()
            if available is None:
                report["free_memory_check"] = "not run: MemAvailable unknown (no /proc/meminfo)"
            else:
                try:
                    sizing.check_host_memory(host * token_bytes, available)
                except ValueError as e:
                    raise fail(t, option, str(e)) from None
                report["free_memory_check"] = "passed"
        else:
            report["free_memory_check"] = "not run: pools not materialized (no host memory taken)"
            self._check_profile_host(t, option, host * token_bytes)
        # sized once: the ratio/size stay as given, l2_tokens holds the result
        object.__setattr__(self, "tiers", dataclasses.replace(t, l2_tokens=host, hicache_ratio=None,
                                                              hicache_size=None))
        object.__setattr__(self, "host_sizing", report)

    def _check_profile_host(self, t, option: str, pool_bytes: int) -> None:
        """A host pool sized by upstream's flags must fit the host memory the profile gives, as
        upstream's own check (free memory less its 10 GiB reserve) would on that node, with every rank
        of the TP group on the node taking its pool: a size it refuses to start with is refused here."""
        from hardware_profiles import load_profile

        try:
            profile = load_profile(self.profile)
        except ValueError as e:
            raise fail(self, "profile", str(e)) from None
        h = profile.host
        if not h.numa_nodes or not h.memory_per_node_gib:
            return
        ranks = min(self.tp.ranks or 1, profile.device.devices_per_node or (self.tp.ranks or 1))
        total = h.numa_nodes * h.memory_per_node_gib * 2**30
        try:
            sizing.check_host_memory(pool_bytes * ranks, int(total))
        except ValueError as e:
            raise fail(t, option, f"{e} on a node of profile {profile.name} ({h.numa_nodes} x "
                       f"{h.memory_per_node_gib:g} GiB; {pool_bytes / 1e9:,.2f} GB per rank x {ranks} rank(s) "
                       "on the node): upstream refuses to start with it") from None

    def _node_of_switch(self, name: str):
        return self.tiers if name in _TIER_SWITCHES else self.storage if name in STORAGE_SWITCHES else self.semantics

    def _switch(self, name: str):
        """One switch's value before resolution: as given, else the preset's."""
        given = getattr(self._node_of_switch(name), name)
        return preset(self.semantics.preset, self.serving.pd_disagg)[name] if given is None else given

    def _resolve_io(self) -> None:
        """io_resolution sglang: what SGLang 0.5.23's server makes of the layout and io backend
        (arg_groups/hicache_hook.py resolve_layout_io_compatibility; page_head moves by kernel only)."""
        t = self.tiers
        if self.semantics.io_resolution != "sglang":
            return
        layout = get_layout(t.host_layout)
        if not layout.upstream_direct and t.io_backend == "direct":
            raise fail(t, "io_backend", "direct does not move the page_head host layout (kernel only, as "
                       "SGLang 0.5.23); give --io-backend kernel or --io-resolution as_given")
        if layout.native_io_backend == "direct" and t.io_backend == "kernel":
            object.__setattr__(self, "tiers", dataclasses.replace(t, io_backend="direct"))

    def _resolve_semantics(self) -> None:
        """Switches left None take the preset's values; `overrides` lists those given that differ."""
        s, t, st = self.semantics, self.tiers, self.storage
        base = preset(s.preset, self.serving.pd_disagg)
        switches = [k for k in SWITCHES if k not in STORAGE_SWITCHES or st.l3 is not None]  # those apply with an L3
        given = {k: getattr(self._node_of_switch(k), k) for k in switches}
        resolved = {k: base[k] if given[k] is None else given[k] for k in switches}
        if resolved["host_free_list"] is None:  # None: the device order
            resolved["host_free_list"] = resolved["free_list"]
        base_host = base["host_free_list"] or resolved["free_list"]
        overrides = tuple(k for k in switches if given[k] is not None
                          and given[k] != (base_host if k == "host_free_list" else base[k]))
        on = {k: resolved[k] for k in switches if k not in _TIER_SWITCHES and k not in STORAGE_SWITCHES}
        object.__setattr__(self, "semantics", dataclasses.replace(s, overrides=overrides, **on))
        object.__setattr__(self, "tiers", dataclasses.replace(t, **{k: resolved[k] for k in _TIER_SWITCHES}))
        if st.l3 is not None:
            object.__setattr__(self, "storage", dataclasses.replace(st, **{k: resolved[k] for k in STORAGE_SWITCHES}))

    # -- making specs -----------------------------------------------------------------------
    @classmethod
    def of(cls, **fields) -> CacheSpec:
        """A spec from flat field names (page_size=16, l1_tokens=..., semantics="sglang-0.5.23", tp=4),
        each routed to its node; `profile` and `backend` are the root's."""
        root, nodes = _route(fields)
        return cls(**{n: NODES[n](**kw) for n, kw in nodes.items()}, **root)

    @classmethod
    def preset(cls, semantics: str = "reference", **fields) -> CacheSpec:
        """A spec whose request-path switches come from preset `semantics`, `fields` overriding them."""
        return cls.of(semantics=semantics, **fields)

    def replace(self, **fields) -> CacheSpec:
        """This spec with flat fields changed (CacheSpec.of's names), checked again as a whole."""
        root, nodes = _route(fields)
        return dataclasses.replace(self, **{n: dataclasses.replace(getattr(self, n), **kw)
                                            for n, kw in nodes.items()}, **root)

    # -- what it says -------------------------------------------------------------------------
    @property
    def page_size(self) -> int:
        return self.geometry.page_size

    def to_dict(self) -> dict:
        """The resolved spec as a nested dict (what a replay's JSON echoes under "spec")."""
        out = {n: {f.name: (list(v) if isinstance(v := getattr(getattr(self, n), f.name), tuple) else v)
                   for f in dataclasses.fields(getattr(self, n))} for n in NODES}
        return dict(out, profile=self.profile, effective_host_layout=self.effective_host_layout,
                    backend=None if self.backend is None else self.backend.name)

    def semantics_config(self) -> dict:
        """The resolved switches as the figures report them, and those that override the preset."""
        s, t = self.semantics, self.tiers
        return dict(semantics=s.preset, hit_count=s.hit_count, backup_scope=s.backup_scope, evict_size=s.evict_size,
                    load_back_threshold=s.load_back_threshold, free_list=t.free_list,
                    host_free_list=t.host_free_list, io_backend=t.io_backend, load_back_quota=s.load_back_quota,
                    backup_alloc=s.backup_alloc, host_reclaim=s.host_reclaim, io_resolution=s.io_resolution,
                    host_sizing=s.host_sizing, semantics_overrides=list(s.overrides))

    @property
    def sync(self) -> bool:
        """Apply completions before each request whenever eviction is possible (finite capacity,
        or real bytes), so figures do not depend on thread timing."""
        t = self.tiers
        return t.materialize or t.l1_tokens is not None or t.l2_tokens is not None

    def ghost_bound(self, l1_tokens: int) -> int:
        """The ghost list's bound for an L1 of `l1_tokens`."""
        e = self.tiers.ghost_entries
        return e if e is not None else max(l1_tokens // self.page_size, MIN_GHOST_ENTRIES)

    def capacities(self, whole_tokens: int = 0) -> tuple[int, int]:
        """(L1, L2) in tokens, rounded down to whole pages; an unlimited tier holds `whole_tokens`
        (at least one page). SpecError if materialized pools would exceed MATERIALIZE_LIMIT_BYTES."""
        ps = self.page_size
        unlimited = max(whole_tokens, ps)
        l1, l2 = (unlimited if v is None else v // ps * ps for v in (self.tiers.l1_tokens, self.tiers.l2_tokens))
        size = (l1 + l2) * self.geometry.token_bytes
        if self.tiers.materialize and size > MATERIALIZE_LIMIT_BYTES:
            raise fail(self.tiers, "materialize", f"pools of {size / 2**30:.1f} GiB exceed "
                       f"{MATERIALIZE_LIMIT_BYTES >> 30} GiB; give l1/l2 capacities, a limit, or a smaller geometry")
        if self.tiers.materialize:
            self._check_pools_fit(l1, l2, size)
        return l1, l2

    def _check_pools_fit(self, l1: int, l2: int, size: int) -> None:
        """SpecError naming the tier to cut when materialized pools of `l1` + `l2` tokens (`size`
        bytes) exceed what this machine can give (hal.memory.budget: the cgroup's room included):
        a tier not given first (it holds the whole trace), else the larger."""
        from hal.memory.budget import shortfall

        t = self.tiers
        unsized = [n for n in ("l1_tokens", "l2_tokens") if getattr(t, n) is None]
        name = unsized[0] if unsized else ("l1_tokens" if l1 >= l2 else "l2_tokens")
        held = "" if not unsized else f"; {name.partition('_')[0].upper()} not given, so it holds the whole trace"
        why = shortfall(size, f"materialized pools of L1 {l1:,} + L2 {l2:,} tokens{held}")
        if why is not None:
            raise fail(t, name, why)

    def tp_rank(self) -> CacheSpec:
        """The spec one rank of the TP group replays: with a shared host, L2 is N x per rank."""
        t, tp = self.tiers, self.tp
        if tp.ranks is None or not tp.shared_host or t.l2_tokens is None:
            return self
        per_rank = t.l2_tokens // self.page_size * self.page_size
        return self.replace(l2_tokens=per_rank * tp.ranks)

    # -- building -----------------------------------------------------------------------------
    def open_backend(self) -> tuple[Any, bool]:
        """(backend, owned): the spec's backend, or a new one of `profile` that the caller closes:
        emu when materialized, else count (no bytes, the same modeled seconds)."""
        if self.backend is not None:
            return self.backend, False
        return get_backend("emu" if self.tiers.materialize else "count", self.profile), True

    def build(self, backend, whole_tokens: int = 0, page_keys: str = "tokens", inline: bool = False):
        """The HiCache this spec describes on `backend` (see capacities for `whole_tokens`), its L3
        attached when the spec has one. `page_keys`: how its tree spells pages (hicache_ref.core.page_keys);
        `inline`: its transfers run on the calling thread (HiCache's `inline`)."""
        from hicache_ref.core.cache import HiCache
        from hicache_ref.l3.attach import StoreOpenError, attach_l3

        if backend.capabilities().moves_bytes != self.tiers.materialize:
            raise SpecError("--materialize", "tiers.materialize", f"backend {backend.name!r} does not match "
                            f"materialize={self.tiers.materialize} (open_backend picks one that does)")
        l1, l2 = self.capacities(whole_tokens)
        cache = HiCache(self, backend, l1, l2, page_keys=page_keys, inline=inline)
        if self.storage.l3 is not None:
            try:
                attach_l3(cache, self.storage)
            except StoreOpenError as e:
                cache.close()
                raise SpecError("--l3", "storage.l3", str(e)) from e
            except BaseException:
                cache.close()
                raise
        return cache
