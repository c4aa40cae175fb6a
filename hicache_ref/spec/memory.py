"""What a run will allocate, checked before it allocates: refuse naming the option to change.

The bound is the kernel's MemAvailable (/proc/meminfo) times `USABLE_FRACTION`, or
HICACHE_MEMORY_BUDGET (a size, e.g. 8GiB) where set, so CI can pin it. The estimates are lower
bounds: what is refused would certainly not fit; what passes can still be tight.
"""

from __future__ import annotations

import os

from hal.units import parse_size
from hicache_ref.spec.fields import SpecError, option_of

USABLE_FRACTION = 0.8  # leave room for the interpreter, torch and the page cache
BUDGET_ENV = "HICACHE_MEMORY_BUDGET"
GIB = 1 << 30
# Per page of capacity the reference keeps an allocator slot and tree bookkeeping, allocated
# up front for the whole capacity (measured: 8 bytes per page per tier, peak RSS).
PAGE_BOOKKEEPING_BYTES = 8


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes a run may allocate: HICACHE_MEMORY_BUDGET, else MemAvailable x USABLE_FRACTION;
    None when neither is known (no /proc)."""
    env = os.environ.get(BUDGET_ENV)
    if env:
        return parse_size(env, name=BUDGET_ENV, minimum=1)
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(int(line.split()[1]) * 1024 * USABLE_FRACTION)
    except (OSError, ValueError, IndexError):
        return None
    return None


def fmt(n: float) -> str:
    return f"{n / GIB:,.1f} GiB" if n >= GIB else f"{n / (1 << 20):,.1f} MiB"


def refuse_over(option: str, needed: float, what: str, field: str = "") -> None:
    """SpecError naming `option` when `needed` bytes exceed what this machine can give."""
    budget = available_bytes()
    if budget is not None and needed > budget:
        source = BUDGET_ENV if os.environ.get(BUDGET_ENV) else "MemAvailable x 0.8"
        raise SpecError(option, field or option, f"needs ~{fmt(needed)} ({what}); this machine has {fmt(budget)} "
                        f"to give ({source}); use a smaller value")


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
