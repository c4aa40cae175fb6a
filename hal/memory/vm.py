"""Virtual-memory primitives for host buffers: aligned mmap, madvise, pre-fault, smaps reading.

Python's mmap module hides the address and cannot place a mapping, so libc is called
directly: we need the raw address for madvise, mbind, move_pages and registration.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re

import numpy as np

PAGE = os.sysconf("SC_PAGE_SIZE")


def _pmd_size() -> int:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 2 << 20


HUGE_PAGE = _pmd_size()
THP_ENABLED_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"

# Same values on x86_64 and aarch64 (asm-generic).
PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000
MADV_HUGEPAGE, MADV_NOHUGEPAGE = 14, 15
MADV_POPULATE_WRITE = 23  # Linux >= 5.14
MADV_COLLAPSE = 25  # Linux >= 6.1
# A range this much on 2 MB pages counts as on huge pages.
WELL_COVERED = 0.99
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.restype = ctypes.c_int
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _os_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _mmap(addr, length, prot, flags, fd=-1) -> int:
    out = _libc.mmap(addr, length, prot, flags, fd, 0)
    if out in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        if err == errno.ENOMEM:
            raise MemoryError(f"mmap of {length} bytes failed: {os.strerror(err)}")
        raise _os_error(f"mmap of {length} bytes")
    return out


def _munmap(addr: int, length: int) -> None:
    if length and _libc.munmap(addr, length) != 0:
        raise _os_error("munmap")


# The user half of a 48-bit virtual address space (x86_64 and aarch64 with 4-level tables): no
# mapping this large can be placed, whatever the host's memory.
ADDRESS_SPACE_BYTES = 1 << 47
MEMINFO_PATH = "/proc/meminfo"


def _meminfo(path: str, keys: tuple[str, ...]) -> dict[str, int] | None:
    """{key: bytes} of the /proc/meminfo lines named; None when the file cannot be read."""
    found = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in keys:
                    found[key] = int(rest.split()[0]) * 1024  # the kernel writes kB (KiB)
    except (OSError, ValueError, IndexError):
        return None
    return found


def memory_and_swap_bytes(path: str = MEMINFO_PATH) -> int | None:
    """MemTotal + SwapTotal of this host in bytes, or None when /proc/meminfo cannot say."""
    totals = _meminfo(path, ("MemTotal", "SwapTotal")) or {}
    return totals["MemTotal"] + totals.get("SwapTotal", 0) if "MemTotal" in totals else None


def memory_available_bytes(path: str = MEMINFO_PATH) -> int | None:
    """MemAvailable of this host in bytes, or None when /proc/meminfo cannot say."""
    return (_meminfo(path, ("MemAvailable",)) or {}).get("MemAvailable")


def map_size_problem(length: int, meminfo: str = MEMINFO_PATH) -> str | None:
    """Why `length` bytes can never be mapped and pre-faulted here, or None.

    Asked before any mmap, so a size no host could hold is refused as bad input instead of
    surfacing as mmap's OSError or MemoryError (or an OOM kill while pre-faulting).
    """
    span = length + HUGE_PAGE + 2 * PAGE  # what map_aligned reserves
    if span > ADDRESS_SPACE_BYTES:
        return f"exceeds the {ADDRESS_SPACE_BYTES} bytes of user address space"
    total = memory_and_swap_bytes(meminfo)
    if total is not None and length > total:
        return f"exceeds this host's memory and swap ({total} bytes, MemTotal + SwapTotal)"
    return None


def map_aligned(length: int, fd: int | None = None) -> int:
    """Map `length` bytes (anonymous private, or `fd` shared) at a HUGE_PAGE-aligned address.

    A PROT_NONE guard page is kept on each side: it stops the kernel from merging our VMA with
    a neighbour (which would blur the smaps figures of the range) and turns overruns into faults.
    """
    span = length + HUGE_PAGE + 2 * PAGE
    base = _mmap(None, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)
    start = -(-(base + PAGE) // HUGE_PAGE) * HUGE_PAGE
    lo, hi = base, base + span  # what of the reservation is still ours to unmap on failure
    try:
        if fd is None:
            _mmap(start, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED)
        else:
            _mmap(start, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd)
        # Give back the reservation outside [guard, mapping, guard]. Once a piece is given back
        # another thread may map there, so the cleanup below only unmaps what is left.
        _munmap(lo, start - PAGE - lo)
        lo = start - PAGE
        _munmap(start + length + PAGE, hi - (start + length + PAGE))
        hi = start + length + PAGE
    except BaseException:
        _munmap(lo, hi - lo)
        raise
    return start


def unmap_aligned(start: int, length: int) -> None:
    """Undo map_aligned (mapping and both guard pages)."""
    _munmap(start - PAGE, length + 2 * PAGE)


def thp_mode(path: str = THP_ENABLED_PATH) -> str | None:
    """The selected value of a THP sysfs setting ('[madvise]' -> 'madvise'); None if unreadable."""
    try:
        with open(path) as f:
            m = re.search(r"\[(\w+)\]", f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def thp_disabled_reason(shared: bool, path: str = THP_ENABLED_PATH) -> str | None:
    """Why anonymous memory cannot get huge pages at all (shared files: see hal.memory.shm).
    `path`: the THP `enabled` file (another sysfs tree for `hicache doctor`'s synthetic hosts)."""
    if shared:
        return None
    try:
        with open(path) as f:
            mode = f.read()
    except OSError:
        return "this kernel has no transparent huge pages; pages are 4 KB"
    if "[never]" in mode:
        return f"{path} is 'never'; pages are 4 KB"
    return None


def madvise_huge(start: int, length: int, on: bool) -> str | None:
    """MADV_HUGEPAGE (or MADV_NOHUGEPAGE, so 'off' holds where THP is 'always'); a warning
    instead of an error when the kernel refuses, since 4 KB pages still work."""
    if _libc.madvise(start, length, MADV_HUGEPAGE if on else MADV_NOHUGEPAGE) != 0:
        err = ctypes.get_errno()
        return f"madvise({'MADV_HUGEPAGE' if on else 'MADV_NOHUGEPAGE'}) failed: {os.strerror(err)}"
    return None


def collapse_huge(start: int, length: int) -> str:
    """MADV_COLLAPSE: move the range onto 2 MB pages now, compacting memory if need be, where the
    fault left 4 KB pages for want of free 2 MB blocks; ranges already huge are skipped. Returns
    "collapsed", "unsupported" (kernel < 6.1) or "failed: ERRNO" (ENOMEM: no memory to compact
    into); a failure is a warning, since 4 KB pages still work."""
    if _libc.madvise(start, length, MADV_COLLAPSE) == 0:
        return "collapsed"
    err = ctypes.get_errno()
    return "unsupported" if err == errno.EINVAL else f"failed: {errno.errorcode.get(err, err)}"


def touch_pages(start: int, length: int, fd: int | None, fresh: bool) -> None:
    """Pre-fault by touching one byte per page (kernels without MADV_POPULATE_WRITE).

    numpy does it on this thread only, so a thread NUMA policy in force here applies.
    A shared file is fallocated first: a tmpfs out of space then fails with ENOSPC instead
    of SIGBUS on the touch. Memory that may already hold data (attach) is only read.
    """
    if fd is not None and fresh:
        os.posix_fallocate(fd, 0, length)
    view = np.ctypeslib.as_array((ctypes.c_uint8 * length).from_address(start))[::PAGE]
    if fresh:
        view[:] = 0
    else:
        int(view.sum())


def populate(start: int, length: int, fd: int | None, fresh: bool) -> str:
    """Fault every page in now; returns the method used ("populate_write" or "touch")."""
    if _libc.madvise(start, length, MADV_POPULATE_WRITE) == 0:
        return "populate_write"
    err = ctypes.get_errno()
    if err != errno.EINVAL:  # EINVAL: kernel older than 5.14; anything else is a real failure
        what = f"pre-faulting {length} bytes (MADV_POPULATE_WRITE)"
        if err in (errno.ENOMEM, errno.EFAULT):
            raise MemoryError(f"{what} failed: {os.strerror(err)} (out of memory, or a full tmpfs)")
        raise OSError(err, f"{what}: {os.strerror(err)}")
    touch_pages(start, length, fd, fresh)
    return "touch"


_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) ")


def smaps_range(start: int, length: int) -> dict[str, int]:
    """Bytes per /proc/self/smaps field summed over the VMAs overlapping [start, start+length).

    A VMA that reaches outside the range contributes in proportion to its overlap (guard
    pages keep this from happening to mappings made by map_aligned).
    """
    end = start + length
    totals: dict[str, float] = {}
    share = 0.0
    with open("/proc/self/smaps") as f:
        for line in f:
            m = _HEADER.match(line)
            if m:
                lo, hi = int(m.group(1), 16), int(m.group(2), 16)
                overlap = min(hi, end) - max(lo, start)
                share = overlap / (hi - lo) if overlap > 0 else 0.0
                continue
            if share and line.endswith(" kB\n"):
                key, _, value = line.partition(":")
                totals[key] = totals.get(key, 0.0) + share * int(value.split()[0]) * 1024
    return {k: int(v) for k, v in totals.items()}
