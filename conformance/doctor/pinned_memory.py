"""`hicache doctor`'s pinning checks: may this process pin the pool (memlock), and what registering it costs.

Registration pins the host pool for DMA: it counts against RLIMIT_MEMLOCK unless the process holds
CAP_IPC_LOCK, and a large registered range slows the workload (seed work (P800 acceptance runs)).
"""

from __future__ import annotations

import os
import resource
from typing import Any

from conformance.doctor.records import GIB, Check, fmt_bytes, read_text

# The seed work: registering 80 GB of host pool slowed the workload +20.6%, 15 GB only +8.8%.
REGISTERED_WARN_BYTES = 16 * GIB
CAP_IPC_LOCK = 14


def cap_ipc_lock(proc_root: str = "/proc") -> bool | None:
    for line in (read_text(os.path.join(proc_root, "self/status")) or "").splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_IPC_LOCK & 1)
    return None


def check_memlock(pool_bytes: int, limit: int | None, ipc_lock: bool | None) -> Check:
    """Pinning the pool for DMA (and RDMA registration) counts against RLIMIT_MEMLOCK unless the
    process holds CAP_IPC_LOCK. limit None = unlimited."""
    shown = "unlimited" if limit is None else fmt_bytes(limit)
    fix = "ulimit -l unlimited  (memlock unlimited in /etc/security/limits.conf; LimitMEMLOCK=infinity under systemd)"
    if ipc_lock:
        return Check("memlock", "ok", f"limit {shown}; CAP_IPC_LOCK held, so the limit does not apply", "")
    if limit is None or limit >= pool_bytes:
        return Check("memlock", "ok", f"limit {shown} >= pool {fmt_bytes(pool_bytes)}", "")
    return Check("memlock", "fail", f"limit {shown} < pool {fmt_bytes(pool_bytes)}: pinning the pool will fail", fix)


def memlock_limit() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else soft


def check_registered_size(profile: Any, pool_bytes: int) -> Check:
    seconds = None if profile is None else profile.link.registration_seconds(pool_bytes)
    cost = (f"modeled registration {seconds:.1f} s ({profile.name})" if seconds is not None
            else "registration time not modeled" + (f" by profile {profile.name}" if profile else " (no --profile)"))
    value = f"registering {fmt_bytes(pool_bytes)}: {cost}"
    if pool_bytes > REGISTERED_WARN_BYTES:
        return Check("registered_size", "warn",
                     value + "; seed work: 80 GB registered slowed the workload +20.6%, 15 GB +8.8%",
                     f"register at most ~{fmt_bytes(REGISTERED_WARN_BYTES)} (a bounded staging window), not the whole pool")
    return Check("registered_size", "ok", value, "")
