"""What a replay's capacities will allocate, checked before it allocates: refuse naming the option.

The machine's bound is hal.memory.budget's (MemAvailable x 0.8, or HICACHE_MEMORY_BUDGET).
"""

from __future__ import annotations

from hal.memory.budget import shortfall
from hicache_ref.spec.fields import SpecError, option_of

# Per page of capacity the reference keeps an allocator slot and tree bookkeeping, allocated
# up front for the whole capacity (measured: 8 bytes per page per tier, peak RSS).
PAGE_BOOKKEEPING_BYTES = 8


def refuse_over(option: str, needed: float, what: str, field: str = "") -> None:
    """SpecError naming `option` when `needed` bytes exceed what this machine can give (hal.memory.budget)."""
    why = shortfall(needed, what)
    if why is not None:
        raise SpecError(option, field or option, why)


def check_capacity(spec) -> None:
    """Refuse, naming the option, capacities whose bookkeeping (and pools) cannot fit here; a TP
    group with a shared host is checked at the L2 one rank holds."""
    spec = spec.tp_rank()
    t = spec.tiers
    for name in ("l1_tokens", "l2_tokens"):
        tokens = getattr(t, name)
        if tokens is None:
            continue
        per_token = PAGE_BOOKKEEPING_BYTES / spec.page_size + (spec.geometry.token_bytes if t.materialize else 0)
        what = "per-page bookkeeping" + (" and KV pool" if t.materialize else "")
        refuse_over(option_of(t, name), tokens * per_token, f"{what} of {tokens:,} tokens", f"tiers.{name}")
