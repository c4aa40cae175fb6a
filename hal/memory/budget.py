"""What this machine can give a run, checked before it allocates: refuse with the option to change.

Each command estimates its largest allocations from its arguments (tokens x geometry bytes,
index arrays, per-page bookkeeping) and calls `refuse_over`. The bound is the kernel's
MemAvailable (/proc/meminfo) times `USABLE_FRACTION`, or HICACHE_MEMORY_BUDGET (a size, e.g.
8GiB) where set, so CI can pin it. The estimates are lower bounds: what is refused would
certainly not fit; what passes can still be tight.
"""

from __future__ import annotations

import os

from hal.units import parse_size

USABLE_FRACTION = 0.8  # leave room for the interpreter, torch and the page cache
BUDGET_ENV = "HICACHE_MEMORY_BUDGET"
GIB = 1 << 30


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes this command may allocate: HICACHE_MEMORY_BUDGET, else MemAvailable x USABLE_FRACTION;
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


def shortfall(needed: float, what: str) -> str | None:
    """Why `needed` bytes (of `what`) cannot be given here, or None when they fit (or nothing is known)."""
    budget = available_bytes()
    if budget is None or needed <= budget:
        return None
    source = BUDGET_ENV if os.environ.get(BUDGET_ENV) else "MemAvailable x 0.8"
    return f"needs ~{fmt(needed)} ({what}); this machine has {fmt(budget)} to give ({source}); use a smaller value"


def refuse_over(option: str, needed: float, what: str) -> None:
    """ValueError naming `option` (the one line `hicache: <option>: ...`) when `needed` bytes exceed
    what this machine can give."""
    why = shortfall(needed, what)
    if why is not None:
        raise ValueError(f"{option}: {why}")
