"""What this machine can give a run, checked before it allocates: refuse with the option to change.

Each command estimates its largest allocations from its arguments (tokens x geometry bytes,
index arrays, per-page bookkeeping) and calls `refuse_over`. The bound is the kernel's
MemAvailable (/proc/meminfo), or the room left under this process's cgroup memory limit (v2
memory.max less memory.current, v1 memory.limit_in_bytes less memory.usage_in_bytes, the
tightest of its ancestors) when that is less, times `USABLE_FRACTION`; or HICACHE_MEMORY_BUDGET
(a size, e.g. 8GiB) where set, so CI can pin it; a value that is not a size is refused whenever
the variable is set (`check_env`), not only when a command asks. The estimates are lower bounds: what is refused would
certainly not fit; what passes can still be tight.
"""

from __future__ import annotations

import os

from hal.common.units import parse_size

USABLE_FRACTION = 0.8  # leave room for the interpreter, torch and the page cache
BUDGET_ENV = "HICACHE_MEMORY_BUDGET"
GIB = 1 << 30


CGROUP_ROOT = "/sys/fs/cgroup"
_V2 = ("memory.max", "memory.current", "inactive_file")
_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def check_env() -> int | None:
    """HICACHE_MEMORY_BUDGET as bytes (None when unset); ValueError naming it when it is not a size."""
    env = os.environ.get(BUDGET_ENV)
    return parse_size(env, name=BUDGET_ENV, minimum=1) if env else None


def _meminfo_available(meminfo: str) -> int | None:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _number(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _stat(path: str, key: str) -> int:
    """The value of `key` in a cgroup's memory.stat, 0 when absent."""
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key and value.strip().isdigit():
                    return int(value)
    except OSError:
        pass
    return 0


def cgroup_room(proc_cgroup: str = "/proc/self/cgroup", root: str = CGROUP_ROOT) -> int | None:
    """Bytes this process's cgroups (v2 and v1, each level up to the root) still let it use: the
    least of limit - (usage - inactive page cache); None when no limit is set or none can be read."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "":
            base, files = root, _V2
        elif "memory" in controllers.split(","):
            base, files = os.path.join(root, "memory"), _V1
        else:
            continue
        rel = path.strip("/")
        while True:  # this cgroup and each ancestor (a container may see its own as the root)
            folder = os.path.join(base, rel) if rel else base
            limit, used = _number(os.path.join(folder, files[0])), _number(os.path.join(folder, files[1]))
            if limit is not None and limit < 1 << 60:  # v1 writes "no limit" as a huge number
                # the page cache it counts, inactive, is given back under pressure: room, not use
                cache = _stat(os.path.join(folder, "memory.stat"), files[2])
                rooms.append(max(0, limit - max(0, (used or 0) - cache)))
            if not rel:
                break
            rel = os.path.dirname(rel)
    return min(rooms) if rooms else None


def available_bytes(meminfo: str = "/proc/meminfo", proc_cgroup: str = "/proc/self/cgroup",
                    root: str = CGROUP_ROOT) -> int | None:
    """Bytes this command may allocate: HICACHE_MEMORY_BUDGET, else the least of MemAvailable and the
    cgroup's room, x USABLE_FRACTION; None when none is known (no /proc)."""
    pinned = check_env()
    if pinned is not None:
        return pinned
    known = [n for n in (_meminfo_available(meminfo), cgroup_room(proc_cgroup, root)) if n is not None]
    return int(min(known) * USABLE_FRACTION) if known else None


def fmt(n: float) -> str:
    if n >= GIB << 20:  # a million GiB and up: a few digits say it (a 400-digit figure says nothing)
        return f"{n / GIB:.3g} GiB"
    return f"{n / GIB:,.1f} GiB" if n >= GIB else f"{n / (1 << 20):,.1f} MiB"


def shortfall(needed: float, what: str) -> str | None:
    """Why `needed` bytes (of `what`) cannot be given here, or None when they fit (or nothing is known)."""
    budget = available_bytes()
    if budget is None or needed <= budget:
        return None
    source = BUDGET_ENV if os.environ.get(BUDGET_ENV) else "the least of MemAvailable and the cgroup's room, x 0.8"
    return f"needs ~{fmt(needed)} ({what}); this machine has {fmt(budget)} to give ({source}); use a smaller value"


def refuse_over(option: str, needed: float, what: str) -> None:
    """ValueError naming `option` (the one line `hicache: <option>: ...`) when `needed` bytes exceed
    what this machine can give."""
    why = shortfall(needed, what)
    if why is not None:
        raise ValueError(f"{option}: {why}")
