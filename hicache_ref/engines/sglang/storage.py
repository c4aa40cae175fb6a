"""L3 on the sglang engine: what it refuses, the object order it writes, the rank it stamps.

The engine runs upstream's own storage backend (hicache_ref.engines.sglang.stores) and prefetch
(hicache_ref.engines.sglang.prefetch); the options here are the reference's that upstream has no
setting for, refused with one line naming each before anything is built.
"""

from __future__ import annotations

import dataclasses

from hicache_ref.engines.sglang.stores import STORES, mooncake_parts
from hicache_ref.storage.objects import DEFAULT_OBJECT_ORDER
from hicache_ref.storage.registry import split_spec


def refuse_unsupported(storage, overrides=()) -> None:
    """ValueError naming the option the engine cannot run with an L3 (before anything is built);
    `overrides`: the semantics switches given against the preset (a preset's own value of a switch
    upstream has no setting for is the reference's model, not a request to upstream)."""
    name, args = split_spec(storage.l3)
    if name not in STORES:
        raise ValueError(f"--l3: the sglang engine runs upstream's own stores: file:DIR (HiCacheFile) or "
                         f"mooncake:... (MooncakeStore); {name}: is the reference engine's")
    if name == "file" and ("," in args or not args.strip()):
        raise ValueError("--l3: the sglang engine takes file:DIR only (HiCacheFile has no max_bytes or digest)")
    if name == "mooncake":
        mooncake_parts(storage.l3)
    if storage.key_scheme != "sglang":
        raise ValueError("--l3-keys: upstream's store holds upstream's objects: give --l3-keys sglang")
    for option, value in (("--l3-tag", storage.l3_tag if name == "file" else None),  # MooncakeStore's tag
                          ("--l3-trailer", storage.trailer if storage.trailer == "on" else None),
                          ("--l3-extra-key", storage.extra_key), ("--l3-cache-salt", storage.cache_salt),
                          ("--prefetch-limit", storage.prefetch_limit_tokens)):
        if value is not None:
            raise ValueError(f"{option}: not a setting of the sglang engine's L3 (upstream's {name} store; "
                             "the engine's requests carry no namespace)")
    if storage.prefetch_policy != "wait_complete":
        raise ValueError("--prefetch-policy: the sglang engine pins upstream's timing (every prefetch completes "
                         "before admission): give --prefetch-policy wait_complete")
    if storage.prefetch_anchor != "backed_up" and "prefetch_anchor" in overrides:
        raise ValueError("--prefetch-anchor: upstream's scheduler prefetches past a backed-up prefix only "
                         "(give --prefetch-anchor backed_up, or leave it out)")
    if storage.prefetch_slack_seconds:
        raise ValueError("--prefetch-slack-ms: the sglang engine models no queue time (give 0)")


def with_upstream_order(spec):
    """`spec` with its L3 objects in the byte order upstream writes them in: its host layout's
    (the default object order names the default server's; another one given is refused)."""
    st, layout = spec.storage, spec.effective_host_layout
    if st.object_layout == layout:
        return spec
    if st.object_layout != DEFAULT_OBJECT_ORDER:
        raise ValueError(f"--l3-object-layout: upstream writes pages in its host layout's order ({layout}); "
                         f"give --l3-object-layout {layout} or leave it out")
    return dataclasses.replace(spec, storage=dataclasses.replace(st, object_layout=layout))


# Upstream's storage config reads the process's place in its parallel groups, which a server
# publishes at launch; the engine is one rank of one (serial replay; --tp replays one rank).
ONE_RANK = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_tp_rank=0, attn_tp_size=1, attn_cp_rank=0,
                attn_cp_size=1, attn_dcp_rank=0, attn_dcp_size=1, attn_dp_rank=0, attn_dp_size=1, dp_rank=0, dp_size=1)


def stamp_one_rank() -> None:
    """Publish one rank's parallel place for upstream's storage (undone by `clear_rank`)."""
    from sglang.srt.runtime_context import get_parallel

    get_parallel().override_permanently(**ONE_RANK)


def clear_rank() -> None:
    from sglang.srt.runtime_context import get_parallel

    get_parallel().clear_stamp()
