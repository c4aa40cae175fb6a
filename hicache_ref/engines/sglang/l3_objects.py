"""L3 on the sglang engine: the object order it writes, the rank it stamps.

The engine runs upstream's own storage backend (hicache_ref.engines.sglang.stores) and prefetch
(hicache_ref.engines.sglang.prefetch); the L3 options upstream has no setting for are refused
with the rest (hicache_ref.engines.sglang.support).
"""

from __future__ import annotations

import dataclasses

from hicache_ref.storage.objects import DEFAULT_OBJECT_ORDER


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
