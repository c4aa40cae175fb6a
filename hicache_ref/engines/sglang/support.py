"""Every spec field on the sglang engine: honoured (upstream is given it, or the harness runs it
around upstream's cache) or refused with the reason (upstream has no setting for it).

Checked in this order before anything is built (hicache_ref.spec.engine_support.first_refusal): the
parallel and L3 options first, the pools' memory last. A request-path switch is upstream's own
decision: a switch given against the preset is refused unless it is SGLang 0.5.23's value (a
preset's own value is the reference's model, not a request to upstream).
"""

from __future__ import annotations

from hal.memory.budget import shortfall
from hal.transfer.layout_registry import get_layout
from hicache_ref.engines.sglang.copy_pricing import narrow_spec
from hicache_ref.engines.sglang.pin import SEMANTICS_PRESET, SGLANG_VERSION
from hicache_ref.engines.sglang.stores import STORES, mooncake_parts
from hicache_ref.spec.engine_support import Honoured, Refused
from hicache_ref.spec.geometry import unaligned_rows
from hicache_ref.spec.presets import preset
from hicache_ref.storage.registry import split_spec

ENGINE_NAME = "sglang"


def pools_shortfall(spec, l1: int, l2: int) -> str | None:
    """Why upstream's pools of `l1` + `l2` tokens of `spec`'s rows do not fit in this machine's
    memory (they are real tensors, unlike the reference's count-backend pools), or None."""
    return shortfall((l1 + l2) * spec.geometry.token_bytes, f"SGLang's device and host KV pools, L1 {l1:,} + L2 {l2:,} "
                     f"tokens of {spec.geometry.token_bytes:,}-byte rows")


def pools_refusal(spec, l1: int, l2: int) -> str | None:
    why = pools_shortfall(spec, l1, l2)
    return None if why is None else f"the sglang engine {why}"


def refuse_pools(spec, l1: int, l2: int) -> None:
    """ValueError naming --l1-tokens when upstream's pools cannot fit even on `spec`'s rows."""
    if (why := pools_refusal(spec, l1, l2)) is not None:
        raise ValueError(f"--l1-tokens: {why}")


def _upstream(name: str):
    """Accepts switch `name` unless it was given against the preset with a value not upstream's."""
    def accepts(spec, value) -> bool:
        return name not in spec.semantics.overrides or value == preset(SEMANTICS_PRESET, spec.serving.pd_disagg)[name]
    return accepts


def _switch(name: str, option: str) -> Refused:
    return Refused(f"the sglang engine makes SGLang {SGLANG_VERSION}'s own decision here "
                   f"({preset(SEMANTICS_PRESET)[name]}): give that value or leave {option} out", _upstream(name))


def _l3(spec) -> str | None:
    if spec.storage.l3 is None:
        return None
    name, args = split_spec(spec.storage.l3)
    if name not in STORES:
        return ("the sglang engine runs upstream's own stores: file:DIR (HiCacheFile) or "
                f"mooncake:... (MooncakeStore); {name}: is the reference engine's")
    if name == "file" and ("," in args or not args.strip()):
        return "the sglang engine takes file:DIR only (HiCacheFile has no max_bytes or digest)"
    if name == "mooncake":
        try:
            mooncake_parts(spec.storage.l3)
        except ValueError as e:
            return str(e).partition(": ")[2]
    return None


def _io_backend(spec) -> str | None:
    t = spec.tiers
    if t.io_backend == "direct" and not get_layout(t.host_layout).upstream_direct:
        return (f"SGLang moves the {t.host_layout} host layout by kernel only "
                "(give --io-backend kernel, or --semantics sglang-0.5.23)")
    return None


# SGLang 0.5.23's hicache_write_policy choices: a write policy the reference adds is not upstream's.
UPSTREAM_WRITE_POLICIES = ("write_back", "write_through", "write_through_selective")


def _write_policy(spec) -> str | None:
    policy = spec.tiers.write_policy
    if policy in UPSTREAM_WRITE_POLICIES:
        return None
    return f"SGLang {SGLANG_VERSION} has no write policy {policy!r} ({', '.join(UPSTREAM_WRITE_POLICIES)})"


def _host_layout(spec) -> str | None:
    """A host layout without an upstream op pair is the reference's own: SGLang has no pool in it."""
    layout = spec.tiers.host_layout
    if layout is None or get_layout(layout).ops(spec.geometry) is not None:
        return None
    return f"SGLang {SGLANG_VERSION} has no {layout} host layout (it names no upstream op pair)"


def _rows(spec) -> str | None:
    why = unaligned_rows(spec.geometry)
    return None if why is None else f"{why}, so SGLang cannot run these rows (the reference prices any width)"


_NO_NAMESPACE = "the engine's requests carry no namespace"


def _not_a_store_setting(what: str = _NO_NAMESPACE) -> Refused:
    return Refused(f"not a setting of the sglang engine's L3 (upstream's store; {what})")


SUPPORT = {
    "tp.shared_host": Refused("SGLang 0.5.23 keeps a private host pool per rank (drop --shared-host)"),
    "tp.ranks": Honoured("one rank stands for the group (upstream's ranks hold the same tree)"),
    "storage.l3": Honoured("upstream's HiCacheFile or MooncakeStore", _l3),
    "storage.key_scheme": Refused("upstream's store holds upstream's objects: give --l3-keys sglang",
                                  lambda s, v: v in (None, "sglang")),
    "storage.l3_tag": Honoured("MooncakeStore's extra_backend_tag",
                               lambda s: "not a setting of the sglang engine's L3 (upstream's file store; "
                               f"{_NO_NAMESPACE})" if s.storage.l3_tag is not None
                               and split_spec(s.storage.l3)[0] == "file" else None),
    "storage.trailer": Refused("not a setting of the sglang engine's L3 (upstream's objects have no "
                               "integrity trailer)", lambda s, v: v != "on"),
    "storage.extra_key": _not_a_store_setting(),
    "storage.cache_salt": _not_a_store_setting(),
    "storage.prefetch_limit_tokens": _not_a_store_setting("its rate limit is upstream's own rule"),
    "storage.prefetch_policy": Refused("the sglang engine pins upstream's timing (every prefetch completes "
                                       "before admission): give --prefetch-policy wait_complete",
                                       lambda s, v: v in (None, "wait_complete")),
    "storage.prefetch_anchor": Refused("upstream's scheduler prefetches past a backed-up prefix only "
                                       "(give --prefetch-anchor backed_up, or leave it out)",
                                       _upstream("prefetch_anchor")),
    "storage.prefetch_slack_seconds": Refused("the sglang engine models no queue time (give 0)",
                                              lambda s, v: not v),
    "storage.prefetch_timeout_start": _switch("prefetch_timeout_start", "--prefetch-timeout-start"),
    "storage.prefetch_limit_rule": _switch("prefetch_limit_rule", "--prefetch-limit-rule"),
    "storage.prefetch_threshold": Honoured("upstream's storage config prefetch_threshold"),
    "storage.l3_model": Honoured("upstream's served_model_name"),
    "storage.object_layout": Honoured("upstream writes its host layout's order; another order is refused "
                                      "when the store is opened (storage.with_upstream_order)"),
    "storage.l3_tokens": Refused("sizes the model store, which the sglang engine does not run"),
    "tiers.ghost": Refused("not an SGLang switch"),
    "tiers.ghost_entries": Refused("bounds the ghost list, not an SGLang switch"),
    "tiers.io_backend": Honoured("upstream's hicache_io_backend", _io_backend),
    "tiers.host_layout": Honoured("upstream's hicache_mem_layout", _host_layout),
    "tiers.write_policy": Honoured("upstream's hicache_write_policy", _write_policy),
    "tiers.materialize": Honoured("every hit's bytes checked in upstream's pools"),
    "tiers.l2_tokens": Honoured("upstream's host pool, sized by an hicache_ratio giving exactly these tokens"),
    "tiers.hicache_ratio": Honoured("resolved into --l2-tokens by the spec, as upstream sizes it"),
    "tiers.hicache_size": Honoured("resolved into --l2-tokens by the spec, as upstream sizes it"),
    "tiers.free_list": _switch("free_list", "--free-list"),
    "tiers.host_free_list": _switch("host_free_list", "--host-free-list"),
    "geometry.attention": Honoured("upstream's MLA or MHA device pool"),
    "geometry.layers": Honoured("upstream's pools (narrow rows priced at these where they do not fit)"),
    "geometry.heads": Honoured("upstream's MHA device pool"),
    "geometry.kv_dim": Honoured("upstream's pools", _rows),
    "geometry.dtype": Honoured("upstream's pools"),
    "geometry.page_size": Honoured("upstream's page_size"),
    "geometry.model": Honoured("resolved by the spec into the geometry upstream's pools take"),
    "tiers.mem_fraction_static": Honoured("resolved by the spec into --l1-tokens, as upstream sizes its KV pool"),
    "semantics.preset": Refused(f"the sglang engine makes SGLang {SGLANG_VERSION}'s decisions: give "
                                f"--semantics {SEMANTICS_PRESET} or leave it out",
                                lambda s, v: v in ("reference", SEMANTICS_PRESET)),
    "semantics.hit_count": _switch("hit_count", "--hit-count"),
    "semantics.backup_scope": _switch("backup_scope", "--backup-scope"),
    "semantics.backup_alloc": _switch("backup_alloc", "--backup-alloc"),
    "semantics.evict_size": _switch("evict_size", "--evict-size"),
    "semantics.host_reclaim": _switch("host_reclaim", "--host-reclaim"),
    "semantics.io_resolution": _switch("io_resolution", "--io-resolution"),
    "semantics.host_sizing": _switch("host_sizing", "--host-sizing"),
    "semantics.load_back_threshold": _switch("load_back_threshold", "--load-back-threshold"),
    "semantics.load_back_quota": Refused("upstream's mem_quota is not set by the sglang engine (leave it out)"),
    "serving.concurrency": Honoured("upstream's cache under the reference's serving loop (hicache_ref.sim.run.steps)"),
    "serving.timestamps": Honoured("the reference's serving loop"),
    "serving.pd_disagg": Honoured("upstream's cache inserts each request unfinished, then finished"),
    "serving.step_ms": Honoured("the reference's serving loop"),
    "profile": Honoured("prices every copy upstream makes"),
    # last: the memory the pools need, once every other option is known to run
    "tiers.l1_tokens": Honoured("upstream's device pool", lambda s: pools_refusal(
        narrow_spec(s), s.tiers.l1_tokens or 0, s.tiers.l2_tokens or 0)),
}
