"""NUMA memory policy syscalls through ctypes: set_mempolicy, get_mempolicy, mbind, move_pages.

glibc does not wrap these (libnuma does, but it is not always installed), so we call
`syscall(2)` with the per-architecture numbers. Node masks are arrays of C `unsigned long`
with bit n = node n, as the kernel expects.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
from collections.abc import Iterable, Iterator

import numpy as np

from hal.topology.topology_model import parse_cpulist  # the one parser of the sysfs list format ('0-3,8')

# Syscall numbers differ per architecture; aarch64 uses the generic table.
_SYSCALLS = {
    "x86_64": {"mbind": 237, "set_mempolicy": 238, "get_mempolicy": 239, "move_pages": 279},
    "aarch64": {"mbind": 235, "get_mempolicy": 236, "set_mempolicy": 237, "move_pages": 239},
}

# Policy modes (include/uapi/linux/mempolicy.h).
MPOL_DEFAULT = 0
MPOL_PREFERRED = 1
MPOL_BIND = 2
MPOL_INTERLEAVE = 3
MPOL_LOCAL = 4
MPOL_PREFERRED_MANY = 5
MPOL_WEIGHTED_INTERLEAVE = 6
# Mode flags the kernel ORs into the mode it returns from get_mempolicy.
MPOL_F_STATIC_NODES = 1 << 15
MPOL_F_RELATIVE_NODES = 1 << 14
MPOL_F_NUMA_BALANCING = 1 << 13
_MODE_FLAGS = MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES | MPOL_F_NUMA_BALANCING

MODES = {"bind": MPOL_BIND, "interleave": MPOL_INTERLEAVE}
MODE_NAMES = {
    MPOL_DEFAULT: "default",
    MPOL_PREFERRED: "preferred",
    MPOL_BIND: "bind",
    MPOL_INTERLEAVE: "interleave",
    MPOL_LOCAL: "local",
    MPOL_PREFERRED_MANY: "preferred_many",
    MPOL_WEIGHTED_INTERLEAVE: "weighted_interleave",
}

# Room for 1024 nodes: more than any kernel's MAX_NUMNODES we care about, and
# get_mempolicy rejects a mask shorter than the kernel's node count.
_MASK_BITS = 1024
_ULONG_BITS = ctypes.sizeof(ctypes.c_ulong) * 8
_MaskArray = ctypes.c_ulong * (_MASK_BITS // _ULONG_BITS)

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long

NODE_ONLINE_PATH = "/sys/devices/system/node/online"


class NumaUnsupported(OSError):
    """This architecture or kernel has no NUMA policy syscalls."""


def _nr(name: str) -> int:
    table = _SYSCALLS.get(platform.machine())
    if table is None:
        raise NumaUnsupported(errno.ENOSYS, f"no NUMA syscall numbers for {platform.machine()}")
    return table[name]


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _mask(nodes: Iterable[int]) -> _MaskArray:
    mask = _MaskArray()
    for n in nodes:
        if not 0 <= n < _MASK_BITS:
            raise ValueError(f"nodes: node {n} is outside 0..{_MASK_BITS - 1}")
        mask[n // _ULONG_BITS] |= 1 << (n % _ULONG_BITS)
    return mask


def _nodes_of(mask: _MaskArray) -> list[int]:
    return [i for i in range(_MASK_BITS) if mask[i // _ULONG_BITS] >> (i % _ULONG_BITS) & 1]


def online_nodes() -> list[int]:
    """Nodes the kernel has online; [0] where sysfs has no node directory (non-NUMA kernel).
    A list that does not parse raises ValueError naming the file."""
    try:
        with open(NODE_ONLINE_PATH) as f:
            return list(parse_cpulist(f.read(), NODE_ONLINE_PATH))
    except FileNotFoundError:
        return [0]


def validate_nodes(nodes: Iterable[int], arg: str = "nodes") -> list[int]:
    """Sorted, de-duplicated node ids; ValueError naming `arg` for an empty list or an offline node."""
    try:
        given = list(nodes)
        if any(isinstance(n, bool) or int(n) != n for n in given):
            raise TypeError
        out = sorted({int(n) for n in given})
        if len(out) != len(given):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"{arg}: nodes must be a list of distinct ints, got {nodes!r}") from None
    if not out:
        raise ValueError(f"{arg}: the node list is empty")
    online = set(online_nodes())
    missing = [n for n in out if n not in online]
    if missing:
        raise ValueError(f"{arg}: node(s) {missing} do not exist; online nodes: {sorted(online)}")
    return out


def set_mempolicy(mode: int, nodes: Iterable[int] = ()) -> None:
    """Set the calling thread's policy. MPOL_DEFAULT/MPOL_LOCAL take no nodes."""
    nodes = list(nodes)
    mask = _mask(nodes) if nodes else None
    # The kernel historically drops one bit from maxnode, hence +1 (libnuma does the same).
    ret = _syscall(
        ctypes.c_long(_nr("set_mempolicy")),
        ctypes.c_int(mode),
        mask,
        ctypes.c_ulong(_MASK_BITS + 1 if nodes else 0),
    )
    _check(ret, f"set_mempolicy({MODE_NAMES.get(mode & ~_MODE_FLAGS, mode)}, {nodes})")


def get_mempolicy(address: int | None = None) -> tuple[int, list[int]]:
    """(mode incl. mode flags, nodes) of the calling thread, or of the VMA at `address`."""
    mode = ctypes.c_int(0)
    mask = _MaskArray()
    MPOL_F_ADDR = 2
    ret = _syscall(
        ctypes.c_long(_nr("get_mempolicy")),
        ctypes.byref(mode),
        mask,
        ctypes.c_ulong(_MASK_BITS),
        ctypes.c_void_p(address),
        ctypes.c_ulong(MPOL_F_ADDR if address is not None else 0),
    )
    _check(ret, "get_mempolicy")
    return mode.value, _nodes_of(mask)


def mbind(address: int, length: int, mode: int, nodes: Iterable[int] = (), flags: int = 0) -> None:
    """Set the policy of the VMAs in [address, address+length); address must be page aligned."""
    nodes = list(nodes)
    mask = _mask(nodes) if nodes else None
    ret = _syscall(
        ctypes.c_long(_nr("mbind")),
        ctypes.c_void_p(address),
        ctypes.c_ulong(length),
        ctypes.c_int(mode),
        mask,
        ctypes.c_ulong(_MASK_BITS + 1 if nodes else 0),
        ctypes.c_uint(flags),
    )
    _check(ret, f"mbind({MODE_NAMES.get(mode, mode)}, {nodes})")


def move_pages_query(addresses) -> np.ndarray:
    """Node of each page as int32 (move_pages with nodes=NULL only queries, it moves nothing);
    a negative errno (e.g. -ENOENT: not populated) where the page has no node."""
    pages = np.ascontiguousarray(addresses, dtype=np.uint64)
    status = np.zeros(len(pages), dtype=np.int32)
    if len(pages) == 0:
        return status
    ret = _syscall(
        ctypes.c_long(_nr("move_pages")),
        ctypes.c_int(0),  # this process
        ctypes.c_ulong(len(pages)),
        ctypes.c_void_p(pages.ctypes.data),
        None,
        ctypes.c_void_p(status.ctypes.data),
        ctypes.c_int(0),
    )
    _check(ret, "move_pages(query)")
    return status


def _restore(mode: int, nodes: list[int]) -> None:
    # Default and local take no mask; a preferred policy with an empty mask means local.
    if mode & ~_MODE_FLAGS in (MPOL_DEFAULT, MPOL_LOCAL) or not nodes:
        set_mempolicy(mode)
    else:
        set_mempolicy(mode, nodes)


@contextlib.contextmanager
def thread_policy(mode: int, nodes: Iterable[int]) -> Iterator[None]:
    """Run the body under `mode`/`nodes` on this thread; the previous policy comes back
    afterwards, also when the body or the set itself fails. Threads started inside the body
    inherit the policy for good, so the body should start none."""
    prev_mode, prev_nodes = get_mempolicy()
    try:
        set_mempolicy(mode, nodes)
        yield
    finally:
        _restore(prev_mode, prev_nodes)
