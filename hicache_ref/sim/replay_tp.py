"""`hicache replay --tp N [--shared-host]`: what TP sharing of host KV does to one trace's figures.

A TP group's ranks make the same decisions (hicache_ref.tp checks it), so one replay stands for
every rank. Private (the default with --tp): every rank keeps its own L2 of the given size,
the same hits, and every rank writes its own copy, so D2H bytes over the group are N x one
rank's. Shared (`shared_host`): the group's N per-rank L2 budgets become one pool holding one
copy, so the effective L2 capacity is N x the per-rank size (the hit rate rises where L2 was
the limit) and only rank 0 writes (D2H bytes 1/N of private). Host memory is the same N x
per-rank size either way; sharing changes what it can hold.
"""

from __future__ import annotations

from hicache_ref.sim.replay import replay
from hicache_ref.spec import CacheSpec


def tp_replay(spec: CacheSpec, trace, limit: int | None = None) -> dict:
    """hicache_ref.sim.replay.replay for one rank of the TP group `spec.tp` describes, plus the group's figures."""
    tp, shared_host = spec.tp.ranks, spec.tp.shared_host
    if tp is None:
        raise ValueError("--tp: a TP replay needs tp.ranks")
    fig = replay(spec.tp_rank(), trace, limit)
    writers = 1 if shared_host else tp
    copies = 1 if shared_host else tp
    l2 = spec.tiers.l2_tokens
    per_rank = None if l2 is None else l2 // spec.page_size * spec.page_size
    token_bytes = spec.geometry.token_bytes
    fig.update(
        tp=tp, shared_host=shared_host, l2_tokens_per_rank=per_rank, effective_l2_tokens=fig["l2_tokens"],
        host_kv_copies=copies, d2h_writer_ranks=writers,
        d2h_bytes_all_ranks=fig["d2h_bytes"] * writers, h2d_bytes_all_ranks=fig["h2d_bytes"] * tp,
        host_pool_bytes_all_ranks=fig["l2_tokens"] * token_bytes * copies,
    )
    return fig


def tp_summary_line(fig: dict) -> str:
    """The replay summary's line for a TP run."""
    gib = 2**30
    mode = "one shared host pool" if fig["shared_host"] else "a private host pool per rank"
    per = "unlimited" if fig["l2_tokens_per_rank"] is None else f"{fig['l2_tokens_per_rank']:,}"
    return (f"TP {fig['tp']}, {mode}: L2 {per} tokens per rank, effective {fig['effective_l2_tokens']:,}; "
            f"D2H over the group {fig['d2h_bytes_all_ranks'] / gib:.2f} GiB from {fig['d2h_writer_ranks']} "
            f"writer(s); {fig['host_kv_copies']} host KV cop{'y' if fig['host_kv_copies'] == 1 else 'ies'}")
