"""`hicache replay --tp N [--shared-host]`: what sharing host KV across a TP group does to a trace's figures.

The ranks decide alike, so one replay stands for every rank. Private: every rank keeps and writes
its own L2 copy. Shared: the N per-rank budgets become one pool, so effective L2 is N times larger
and only rank 0 writes (D2H 1/N). Host memory is the same either way; sharing changes what it holds.
"""

from __future__ import annotations

from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.run.served_replay import replay_served
from hicache_ref.sim.trace.reader import read_trace
from hicache_ref.spec import CacheSpec


def tp_replay(spec: CacheSpec, trace, limit: int | None = None, off: bool | None = None) -> dict:
    """hicache_ref.sim.run.serial_replay.replay for one rank of the TP group `spec.tp` describes, plus the group's
    figures; served (hicache_ref.sim.run.served_replay) when the spec has a concurrency, as ablate's TP rungs are:
    every rank schedules the same batches, so one rank's served replay stands for the group too."""
    if spec.tp.ranks is None:
        raise ValueError("--tp: a TP replay needs tp.ranks")
    if spec.serving.concurrency is None:
        return tp_group_figures(spec, replay(spec.tp_rank(), trace, limit, off=off))
    requests = list(trace)[:limit] if isinstance(trace, (list, tuple)) else read_trace(trace, limit)
    return tp_group_figures(spec, replay_served(spec.tp_rank(), requests, off=off))


def tp_group_figures(spec: CacheSpec, fig: dict) -> dict:
    """`fig`, one rank's replay of spec.tp_rank() (on any engine), plus the group's figures: the
    writers, the host copies and the bytes over all ranks."""
    tp, shared_host = spec.tp.ranks, spec.tp.shared_host
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
        spec=spec.to_dict(),  # the group as given (L2 per rank), not the one rank replayed for it
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
