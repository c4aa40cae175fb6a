"""Host buffers for the L2 KV pool: allocate_host and attach_host map, place and register them.

The order is the point: map (2 MiB aligned), madvise huge pages, set the NUMA policy, pre-fault,
collapse what faulted onto 4 KB pages, then register. Huge pages and the node are fixed at first
touch, and registration pins pages so they can never be collapsed later; a failure at any step
rolls back the steps before it. The result is a HostBuffer (hal.memory.host_buffer: the object,
close(), and its measured report); the mapping lives as long as any tensor view of it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from hal.common.arg_checks import boolean, positive_int
from hal.memory import numa as _numa
from hal.memory import shm
from hal.memory.host_buffer import HostBuffer, build_buffer
from hal.memory.registration import HostRegistrar, check_registration, register_buffer, release
from hal.memory.vm import (
    HUGE_PAGE,
    PAGE,
    collapse_huge,
    madvise_huge,
    map_aligned,
    map_size_problem,
    populate,
    thp_disabled_reason,
    unmap_aligned,
)

__all__ = ["DEFAULT_REGISTER_CHUNK_BYTES", "HostBuffer", "allocate_host", "attach_host"]

# None: one registration per buffer. A device driver may refuse a copy whose host range crosses
# two registered ranges (Kunlun's does), so a buffer registered in pieces could hold a copy no
# plan may make; a buffer larger than the backend's one-registration limit is refused instead.
DEFAULT_REGISTER_CHUNK_BYTES = None
# Why MADV_COLLAPSE failed, by its errno (the kernel's madvise_collapse_errno).
COLLAPSE_CAUSES = {
    "failed: ENOMEM": "no free memory to compact into 2 MB pages",
    "failed: EBUSY": "this process's cgroup memory limit refused the 2 MB pages' charge",
    "failed: EAGAIN": "pages busy at that moment; a retry may collapse them",
}


def _parse_numa(numa) -> tuple[int, list[int]] | None:
    if numa is None:
        return None
    if (
        not isinstance(numa, tuple | list)
        or len(numa) != 2
        or not isinstance(numa[0], str)
        or numa[0] not in _numa.MODES
    ):
        raise ValueError(f"numa: expected None, ('bind', [nodes]) or ('interleave', [nodes]), got {numa!r}")
    return _numa.MODES[numa[0]], _numa.validate_nodes(numa[1], arg="numa")


def _undo(backend, handles, address, length, path) -> None:
    """Roll back a half-made buffer in reverse order: registration, mapping, file name."""
    if handles:
        release(backend.unregister_host, handles)
    if address is not None:
        unmap_aligned(address, length)
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _populate_huge(address, mapped, fd, fresh, huge_pages, warnings) -> tuple[str, str]:
    """Pre-fault, then collapse onto 2 MB pages what the fault left on 4 KB pages: a fragmented
    host gives a fault no free 2 MB block, and registration would pin those 4 KB pages for good.
    -> (prefault method, collapse outcome: vm.collapse_huge's, "too small" or "not requested")."""
    method = populate(address, mapped, fd, fresh)
    if not huge_pages:
        return method, "not requested"
    if mapped < HUGE_PAGE:  # an attached file smaller than one huge page: the mount is not the reason
        warnings.insert(0, f"the range ({mapped:,} bytes) is smaller than one 2 MB page: it can only be on 4 KB pages")
        return method, "too small"
    collapse = collapse_huge(address, mapped)
    if collapse.startswith("failed"):
        cause = f" ({COLLAPSE_CAUSES[collapse]})" if collapse in COLLAPSE_CAUSES else ""
        warnings.append(f"madvise(MADV_COLLAPSE) {collapse}{cause}; part of the range stays on 4 KB pages")
    return method, collapse


def _map_and_prepare(mapped, fd, huge_pages, policy, fresh, warnings) -> tuple[int, str, str]:
    """Map, madvise, place, pre-fault and collapse; unmaps again on failure.
    -> (address, prefault method, collapse outcome)."""
    address = map_aligned(mapped, fd)
    try:
        why = madvise_huge(address, mapped, huge_pages)
        if why:
            warnings.append(why)
        if policy is None:
            method, collapse = _populate_huge(address, mapped, fd, fresh, huge_pages, warnings)
        else:
            mode, nodes = policy
            # mbind sets the range's own policy (anon and tmpfs pages follow it, whichever thread
            # faults them); the thread policy covers page-cache files and the page tables.
            with _numa.thread_policy(mode, nodes):
                _numa.mbind(address, mapped, mode, nodes)
                method, collapse = _populate_huge(address, mapped, fd, fresh, huge_pages, warnings)
        return address, method, collapse
    except BaseException:
        unmap_aligned(address, mapped)
        raise


def allocate_host(
    nbytes: int,
    *,
    huge_pages: bool = True,
    numa=None,
    shared_dir=None,
    backend: HostRegistrar | None = None,
    register_chunk_bytes: int | None = DEFAULT_REGISTER_CHUNK_BYTES,
    keep_name: bool = False,
) -> HostBuffer:
    """Map `nbytes` of host memory, anonymous private or (with shared_dir) a MAP_SHARED file.

    numa: None, ("bind", [nodes]) or ("interleave", [nodes]). backend: register the range with
    it (None: no registration), in one registration unless register_chunk_bytes asks for pieces
    (a copy across two pieces is one some drivers refuse). keep_name: leave the shared
    file's name in place for attach_host until HostBuffer.unlink() or close().
    """
    nbytes = positive_int("nbytes", nbytes)
    huge_pages, keep_name = boolean("huge_pages", huge_pages), boolean("keep_name", keep_name)
    policy = _parse_numa(numa)
    if backend is not None and not isinstance(backend, HostRegistrar):
        raise ValueError(f"backend: expected a hal.backend.Backend or None, got {type(backend).__name__}")
    if keep_name and shared_dir is None:
        raise ValueError("keep_name: only meaningful with shared_dir")
    # Whole 2 MiB pages when huge pages are wanted, so the tail is not left on 4 KB pages.
    granule = HUGE_PAGE if huge_pages else PAGE
    mapped = -(-nbytes // granule) * granule
    if why := map_size_problem(mapped):
        raise ValueError(f"nbytes: {nbytes} bytes (mapped as {mapped}) {why}")
    register_chunk_bytes = check_registration(backend, register_chunk_bytes, mapped, "nbytes")
    warnings: list[str] = []
    if huge_pages and (why := thp_disabled_reason(shared_dir is not None)):
        warnings.append(why)

    fd = path = None
    if shared_dir is not None:
        directory = shm.validate_dir(shared_dir, mapped)
        shm.reap_dead_files(directory)
        if huge_pages and (why := shm.huge_page_warning(directory)):
            warnings.append(why)
        fd, path = shm.create_file(directory, mapped)
    handles: list[Any] = []
    address = None
    try:
        address, method, collapse = _map_and_prepare(mapped, fd, bool(huge_pages), policy, True, warnings)
        if path is not None and not keep_name:
            os.unlink(path)  # a single user has mapped it: no name left to find or leak
            path = None
        seconds = 0.0
        if backend is not None:
            handles, seconds = register_buffer(backend, address, mapped, register_chunk_bytes)
        info = {
            "shared": shared_dir is not None,
            "huge_pages_requested": bool(huge_pages),
            "policy_requested": None if numa is None else {"mode": numa[0], "nodes": policy[1]},
            "policy_nodes": None if policy is None else set(policy[1]),
            "prefault": method,
            "collapse": collapse,
            "register_seconds": seconds,
            "warnings": warnings,
        }
        fin = (unmap_aligned, address, mapped)
        return build_buffer(address, nbytes, mapped, fin, backend, handles, path, path is not None, info)
    except BaseException:
        _undo(backend, handles, address, mapped, path)
        raise
    finally:
        if fd is not None:
            os.close(fd)  # the mapping keeps the file alive


def attach_host(
    path,
    *,
    huge_pages: bool = True,
    backend: HostRegistrar | None = None,
    register_chunk_bytes: int | None = DEFAULT_REGISTER_CHUNK_BYTES,
) -> HostBuffer:
    """Map a file made by allocate_host(shared_dir=..., keep_name=True) in another process.

    The pages already exist (and have their nodes); pre-faulting only maps them. close() does
    not remove the file; HostBuffer.unlink() does, once every user has attached.
    """
    huge_pages = boolean("huge_pages", huge_pages)
    if register_chunk_bytes is not None:
        register_chunk_bytes = positive_int("register_chunk_bytes", register_chunk_bytes)
    if backend is not None and not isinstance(backend, HostRegistrar):
        raise ValueError(f"backend: expected a hal.backend.Backend or None, got {type(backend).__name__}")
    if not isinstance(path, str | os.PathLike):
        raise ValueError(f"path: expected a file path, got {path!r}")
    fd, size = shm.open_file(path)
    warnings: list[str] = []
    handles: list[Any] = []
    address = None
    try:
        if size % PAGE:
            raise ValueError(f"path: {path} has {size} bytes, not a whole number of pages")
        if why := map_size_problem(size):
            raise ValueError(f"path: {path} has {size} bytes, which {why}")
        register_chunk_bytes = check_registration(backend, register_chunk_bytes, size, "path")
        if huge_pages and (why := thp_disabled_reason(True)):
            warnings.append(why)
        if huge_pages and (why := shm.huge_page_warning(os.path.dirname(os.path.abspath(path)))):
            warnings.append(why)
        address, method, collapse = _map_and_prepare(size, fd, bool(huge_pages), None, False, warnings)
        seconds = 0.0
        if backend is not None:
            handles, seconds = register_buffer(backend, address, size, register_chunk_bytes)
        info = {
            "shared": True,
            "huge_pages_requested": bool(huge_pages),
            "policy_requested": None,
            "policy_nodes": None,
            "prefault": method,
            "collapse": collapse,
            "register_seconds": seconds,
            "warnings": warnings,
        }
        fin = (unmap_aligned, address, size)
        return build_buffer(address, size, size, fin, backend, handles, os.fspath(path), False, info)
    except BaseException:
        _undo(backend, handles, address, size, None)  # the file is the creator's: never removed here
        raise
    finally:
        os.close(fd)
