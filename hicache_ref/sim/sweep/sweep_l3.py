"""The L3 capacity sweep: one trace, a fixed L1 and L2, the model L3 grown tier by tier.

What an L3 of N tokens adds on a trace (`hicache sweep --l3-tokens`): each tier is a replay with the
model store (hicache_ref.storage.model: the L3 decisions, no bytes), so it runs at any geometry.
Per tier: hit rate, marginal gain, L3 bytes read and written, net benefit; the plateau as for L2.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from hicache_ref.sim.price import spread
from hicache_ref.sim.run.baseline import off_spec
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.sweep.plateau import DEFAULT_PLATEAU_GAIN, answer_row, find_plateau, paying_plateau
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.spec import CacheSpec
from hicache_ref.spec.storage import MODEL_STORE, StorageSpec, is_model_store

# The user's L3 options each tier's model store keeps (the capacity is the sweep's).
_CARRIED = ("prefetch_policy", "prefetch_timeout_start", "prefetch_limit_rule", "prefetch_anchor", "prefetch_threshold",
            "prefetch_limit_tokens", "prefetch_slack_seconds")

TIER_KEYS = ("l1_hit_tokens", "l2_hit_tokens", "l3_hit_tokens", "l3_bytes_read", "l3_bytes_written",
             "l3_pages_read", "l3_pages_written", "l3_prefetches", "d2h_bytes", "h2d_bytes",
             "modeled_transfer_seconds", "l3_modeled_stall_seconds", "truncated_requests")
SELECTIVE = "write_through_selective"
# A selective L2 this much smaller than the trace's tokens backs up too little to fill L3.
TIGHT_L2_SHARE = 0.5


# Below this share of the trace's tokens served from L3, the L3 counts as starved.
STARVED_L3_HIT_SHARE = 0.01


def starved_l3_warning(spec: CacheSpec, trace_tokens: int, l3_hit_tokens: int | None = None) -> str | None:
    """Why this spec's L3 will stay nearly empty, naming the option to change, or None: under
    write_through_selective a page reaches L3 only once it is backed up to L2, which it is only
    when hit often enough, so with an L2 much smaller than the trace L3 gets little to serve.
    Given the run's `l3_hit_tokens`, None where L3 served a real share anyway (a trace whose
    reuse backs up enough)."""
    t = spec.tiers
    if spec.storage.l3 is None or t.write_policy != SELECTIVE or t.l2_tokens is None \
            or t.l2_tokens >= TIGHT_L2_SHARE * trace_tokens:
        return None
    if l3_hit_tokens is not None and l3_hit_tokens >= STARVED_L3_HIT_SHARE * trace_tokens:
        return None
    return (f"--write-policy {SELECTIVE}: pages reach L3 only after an L2 backup, and an L2 of "
            f"{t.l2_tokens:,} tokens backs up few of the trace's {trace_tokens:,}, so L3 stays nearly empty; "
            "--write-policy write_through (or write_back) fills it")


def _check(spec: CacheSpec, tiers, plateau_gain) -> list[int]:
    if not isinstance(spec, CacheSpec):
        raise ValueError(f"spec: expected a CacheSpec, got {type(spec).__name__}")
    if spec.storage.l3 is not None and not is_model_store(spec.storage.l3):
        raise ValueError(f"--l3: {spec.storage.l3!r}: the L3 sweep runs the model store (--l3 model:)")
    if spec.tiers.l2_tokens is None or spec.tiers.l2_tokens == 0:
        raise ValueError("--l2-tokens: the L3 sweep grows L3 over one fixed, finite L2: give one capacity")
    tiers = list(tiers)
    if not tiers or any(isinstance(t, bool) or not isinstance(t, int) or t <= 0 for t in tiers):
        raise ValueError(f"--l3-tokens: expected positive token counts, got {tiers!r}")
    find_plateau(tiers, [0.0] * len(tiers), 0.0, plateau_gain)  # order and gain checked before any work
    return tiers


def sweep_l3(spec: CacheSpec, requests: list[TraceRequest], l3_tokens, plateau_gain: float = DEFAULT_PLATEAU_GAIN,
             progress: Callable[[int, int], None] | None = None) -> dict:
    """Replay `requests` with `spec`'s L1, L2 and policies, without L3 and with a model L3 of each
    of `l3_tokens` (strictly increasing); `progress(done, total)` after each replay."""
    tiers = _check(spec, l3_tokens, plateau_gain)
    # No L3 at all: a fresh storage node (every L3 option, the preset's resolved ones included, goes)
    base = dataclasses.replace(spec, storage=StorageSpec())
    storage = spec.storage if spec.storage.l3 is not None else None
    t0 = time.perf_counter()
    total = len(tiers) + 1
    off = replay(off_spec(spec), requests, off=False)  # HiCache off, shared by every replay below
    without = replay(base, requests, off=off)
    if progress is not None:
        progress(1, total)
    rows = []
    most_served = 0
    for i, t in enumerate(tiers):
        extra = {} if storage is None else {k: getattr(storage, k) for k in _CARRIED if getattr(storage, k) is not None}
        f = replay(base.replace(l3=f"{MODEL_STORE}:", l3_tokens=t, **extra), requests, off=off)
        most_served = max(most_served, f.get("l3_hit_tokens", 0))
        rows.append({"l3_tokens": t, "hit_rate": f["hit_rate"], **{k: f[k] for k in TIER_KEYS},
                     **{k: v for k, v in f.items() if k.startswith("net_benefit") or k.startswith("l3_link_")
                        or k in ("l3_shared_uplink_seconds", "l3_service_seconds", "l3_link")},
                     **{k: f.get(k) for k in spread.KEYS}})
        if progress is not None:
            progress(i + 2, total)
    # an L3 tier pays when it beats the same L1 and L2 without L3 (its net benefit above that run's)
    plateau = paying_plateau(tiers, [r["hit_rate"] for r in rows], without["hit_rate"],
                             [r.get("net_benefit_seconds") for r in rows], plateau_gain,
                             floor=without.get("net_benefit_seconds") or 0.0)
    for row, gain in zip(rows, plateau.marginal_gains, strict=True):
        row["marginal_gain"] = gain
    trace_tokens = without["input_tokens"]
    probe = spec.replace(l3=f"{MODEL_STORE}:") if spec.storage.l3 is None else spec
    # the answer at the capacity worth deploying; none when none pays: a tier's answer is against L1
    # alone, not against the same L1 and L2 without L3 that paying is judged by
    at = (None if plateau.none_pays else answer_row(rows, plateau, "l3_tokens")) or \
        dict.fromkeys(("l3_tokens", *spread.KEYS))
    return dict(method="replay", **{k: at[k] for k in spread.KEYS}, answer_l3_tokens=at["l3_tokens"], tiers=rows,
                plateau_l3_tokens=plateau.plateau_l2_tokens, on_plateau=plateau.on_plateau, none_pays=plateau.none_pays,
                plateau_gain=plateau_gain, l1_tokens=without["l1_tokens"],
                l2_tokens=without["l2_tokens"], without_l3_hit_rate=without["hit_rate"],
                without_l3_net_benefit_seconds=without.get("net_benefit_seconds"),
                requests=without["requests"], input_tokens=trace_tokens, page_size=spec.page_size,
                write_policy=spec.tiers.write_policy, host_layout=spec.tiers.host_layout, profile=without["profile"],
                geometry=spec.geometry.config(), token_bytes=spec.geometry.token_bytes,
                warning=starved_l3_warning(probe, trace_tokens, most_served), spec=spec.to_dict(),
                wall_seconds=time.perf_counter() - t0)
