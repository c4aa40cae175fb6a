"""`hicache doctor`'s huge-page checks: THP for anonymous pools, for shared pools in /dev/shm, page tables.

thp_anon and thp_shmem give the verdicts hal.memory gives when it allocates (the same warnings), and
thp_shmem measures a shared test buffer on the real host; page_table_entries counts what the pool
costs in page tables at the coverage numa_placement measured (or the THP mode implies).
"""

from __future__ import annotations

import os

from conformance.doctor.records import GIB, MIB, TEST_BUFFER_BYTES, Check, HostPaths, fmt_bytes, read_text
from hal.memory import shm, vm

PAGE_4K, PAGE_2M, PTE_BYTES = 4096, 2 * MIB, 8

PROCESS_FIX = ("start hicache (and the server) from a shell whose launcher does not call prctl(PR_SET_THP_DISABLE): "
               "grep THP_enabled /proc/self/status must say 1")


def _process_status(paths: HostPaths) -> str:
    return os.path.join(paths.proc_root, "self/status")


def check_thp_anon(paths: HostPaths) -> Check:
    path = os.path.join(paths.sys_root, "kernel/mm/transparent_hugepage/enabled")
    mode = vm.thp_mode(path)
    why = vm.thp_disabled_reason(False, path, _process_status(paths))  # the warning allocate_host gives
    fix = PROCESS_FIX if vm.thp_process_disabled(_process_status(paths)) else f"echo madvise > {path}"
    if mode is None:
        text = read_text(path)
        what = "unreadable" if text is None else f"selects no mode in brackets (reads {text.strip()[:40]!r})"
        return Check("thp_anon", "unknown", f"{path} {what}" + (f" ({why})" if why else ""), fix)
    if why:
        return Check("thp_anon", "warn", f"enabled={mode}: anonymous host pools fault in on 4 KB pages ({why}); "
                     "SGLang's pools stay on them, where only MADV_COLLAPSE (Linux >= 6.1, which hal.memory.host "
                     "applies) moves a pool onto 2 MB pages", fix)
    why = "every anonymous mapping" if mode == "always" else "mappings that madvise (hal.memory.host does)"
    return Check("thp_anon", "ok", f"enabled={mode}: 2 MB pages for {why}", "")


def check_thp_shmem(paths: HostPaths) -> Check:
    """Shared pools (the TP-shared host pool) live in /dev/shm: huge pages there need the tmpfs
    huge= mount option (or shmem_enabled=force); shmem_enabled=deny turns them off everywhere.
    The verdict is hal.memory.shm's, the one allocate_host(shared_dir=...) warns with."""
    path = os.path.join(paths.sys_root, "kernel/mm/transparent_hugepage/shmem_enabled")
    mounts = os.path.join(paths.proc_root, "mounts")
    try:
        hp = shm.shared_huge_pages(paths.shm_dir, mounts=mounts, shmem_enabled_path=path)
    except OSError as e:
        return Check("thp_shmem", "unknown", f"{mounts} unreadable: {e.strerror}",
                     f"run where {mounts} can be read")
    value = (f"shmem_enabled={hp.shmem_enabled or 'unreadable'}; {paths.shm_dir}: "
             f"{hp.fstype} at {hp.mount_point} huge={hp.huge}") + (f" ({hp.warning})" if hp.warning else "")
    if vm.thp_process_disabled(_process_status(paths)):
        # No mount option or sysfs mode helps while the process itself has THP off.
        return Check("thp_shmem", "warn", f"{value}; {vm.PROCESS_DISABLED}", PROCESS_FIX)
    if hp.problem == "deny":
        return Check("thp_shmem", "warn", value, f"echo advise > {path}")
    if hp.problem == "not_tmpfs":
        return Check("thp_shmem", "warn", value, f"mount -t tmpfs -o huge=advise tmpfs {paths.shm_dir}")
    ok = hp.problem is None
    if paths.real and os.path.isdir(paths.shm_dir):
        measured = _shared_coverage(paths.shm_dir)
        if measured is not None:
            value += f"; measured: {measured:.0%} of a {fmt_bytes(TEST_BUFFER_BYTES)} shared test buffer on 2 MB pages"
            if ok and measured < 0.5:
                return Check("thp_shmem", "warn", value + " (configured, but the kernel gave 4 KB pages)",
                             "echo 1 > /proc/sys/vm/compact_memory  (free 2 MB blocks are short)")
            if hp.problem == "no_huge" and measured >= vm.WELL_COVERED:
                return Check("thp_shmem", "ok", value + " (faults give 4 KB pages; MADV_COLLAPSE, which "
                             "hal.memory.host applies before registering, moved them onto 2 MB pages)", "")
    fix = f"mount -o remount,huge=advise {hp.mount_point}  (and huge=advise in its /etc/fstab line)"
    if hp.shmem_enabled is None:
        return Check("thp_shmem", "unknown", value, fix)
    return Check("thp_shmem", "ok" if ok else "warn", value, "" if ok else fix)


def _shared_coverage(directory: str) -> float | None:
    try:
        from hal.memory.host import allocate_host

        buf = allocate_host(TEST_BUFFER_BYTES, huge_pages=True, shared_dir=directory)
    except (ImportError, OSError, ValueError, MemoryError):
        return None
    try:
        return float(buf.report()["huge_page_coverage"])
    finally:
        buf.close()


def check_page_table_entries(pool_bytes: int, coverage: float | None, thp_mode: str | None) -> Check:
    """Page-table entries the pool needs at 4 KB vs 2 MB pages, and what to expect here: the
    measured coverage of the test buffer, or the THP mode when nothing was measured."""
    n4k, n2m = -(-pool_bytes // PAGE_4K), -(-pool_bytes // PAGE_2M)
    if coverage is None:
        coverage = 0.0 if thp_mode in (None, "never") else 1.0
        how = f"assumed from THP mode {thp_mode}"
    else:
        how = "measured on the test buffer"
    expected = int(n4k * (1 - coverage) + n2m * coverage)
    value = (f"{fmt_bytes(pool_bytes)} pool: {n4k:,} PTEs at 4 KB ({fmt_bytes(n4k * PTE_BYTES)} of tables) "
             f"vs {n2m:,} at 2 MB; expected {expected:,} with {coverage:.0%} huge-page coverage ({how})")
    if coverage < 0.99 and pool_bytes >= GIB:
        return Check("page_table_entries", "warn", value,
                     "back the pool with 2 MB pages: THP enabled=madvise|always and madvise before first touch")
    return Check("page_table_entries", "ok", value, "")
