"""Host buffers for the L2 KV pool: mmap, huge pages, NUMA placement, registration, measured report.

The order is the point: map (2 MiB aligned), madvise huge pages, set the NUMA policy, pre-fault,
then register. Huge pages and the node are fixed at first touch, and registration pins pages so
they can never be collapsed later. The mapping lives as long as any tensor view of it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
import weakref
from typing import Any

import numpy as np
import torch

from hal.common.arg_checks import boolean, positive_int
from hal.memory import numa as _numa
from hal.memory import shm
from hal.memory.registration import HostRegistrar, register_ranges, release
from hal.memory.vm import (
    HUGE_PAGE,
    PAGE,
    WELL_COVERED,
    collapse_huge,
    madvise_huge,
    map_aligned,
    map_size_problem,
    populate,
    smaps_range,
    thp_disabled_reason,
    unmap_aligned,
)

# None: one registration per buffer. A device driver may refuse a copy whose host range crosses
# two registered ranges (Kunlun's does), so a buffer registered in pieces could hold a copy no
# plan may make; a buffer larger than the backend's one-registration limit is refused instead.
DEFAULT_REGISTER_CHUNK_BYTES = None
# move_pages is asked about at most this many pages; bigger buffers are sampled evenly.
NUMA_SAMPLE_PAGES = 1 << 16


def _check_registration(backend, chunk: int | None, nbytes: int, arg: str) -> int | None:
    """`chunk` checked (None or a positive int); with None, `nbytes` must fit one registration."""
    if chunk is not None:
        return positive_int("register_chunk_bytes", chunk)
    limit = getattr(backend, "max_registration_bytes", None)
    if backend is not None and limit is not None and nbytes > limit:
        raise ValueError(f"{arg}: {nbytes} bytes is over backend {backend.name!r}'s one-registration limit of "
                         f"{limit} bytes; a copy may not cross two registrations, so use several buffers")
    return None


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


def _register(backend: HostRegistrar, address: int, length: int, chunk: int | None) -> tuple[list[Any], float]:
    """Register in chunks of `chunk` bytes (None: the whole range at once), all or nothing
    (hal.memory.registration)."""
    chunk = length if chunk is None else -(-chunk // PAGE) * PAGE  # pinning is per page: no boundary inside one
    t0 = time.perf_counter()
    handles = register_ranges(backend.register_host, backend.unregister_host, address, length, chunk)
    return handles, time.perf_counter() - t0


class _State:
    """What close() releases; kept apart from HostBuffer so a finalizer can hold it without
    keeping the HostBuffer alive (the finalizer is also what runs at interpreter exit)."""

    def __init__(self, backend, handles, path, owns_file, tensor, backing):
        self.backend, self.handles, self.path, self.owns_file = backend, handles, path, owns_file
        self.tensor, self.backing = tensor, backing
        self.lock = threading.Lock()

    def close(self) -> None:
        errors = release(self.backend.unregister_host, self.handles) if self.backend is not None else []
        if self.owns_file:
            _unlink(self)
        # Dropping our references lets the mapping go now, or when the last outside view dies.
        self.tensor = self.backing = None
        if errors:
            raise errors[0]


def _unlink(state: _State) -> None:
    """Remove the shared file's name, once (HostBuffer.unlink and the finalizer may both ask)."""
    with state.lock:
        path, state.path = state.path, None
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class HostBuffer:
    """A host buffer mapped by allocate_host or attach_host. Use close() (or `with`) to release."""

    def __init__(self, *, address, nbytes, mapped_bytes, finalizer, state, info):
        self.address, self.nbytes, self.mapped_bytes = address, nbytes, mapped_bytes
        self._mapping_finalizer = finalizer
        self._state = state
        self._info = info
        self._closer = weakref.finalize(self, state.close)

    @property
    def tensor(self) -> torch.Tensor:
        """1-D uint8 tensor over the `nbytes` requested; its views keep the memory mapped."""
        t = self._state.tensor
        if t is None:
            raise RuntimeError("HostBuffer is closed")
        return t

    @property
    def closed(self) -> bool:
        return not self._closer.alive

    @property
    def mapped(self) -> bool:
        """False once the memory is unmapped (after close() and the death of the last view)."""
        return self._mapping_finalizer.alive

    @property
    def shared(self) -> bool:
        return self._info["shared"]

    @property
    def shared_path(self) -> str | None:
        """The file's path while it still has a name (keep_name=True, before unlink())."""
        return self._state.path

    def unlink(self) -> None:
        """Remove the shared file's name once every process that needs it has mapped it."""
        _unlink(self._state)

    def close(self) -> None:
        """Unregister, unlink any file, drop the mapping; idempotent. Also runs at exit."""
        self._closer()

    def __enter__(self) -> HostBuffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<HostBuffer {self.nbytes} bytes at {self.address:#x}, shared={self.shared}, {state}>"

    def report(self) -> dict[str, Any]:
        """Measured facts about the range: THP coverage from smaps, placement from move_pages."""
        if self.closed:
            raise RuntimeError("HostBuffer is closed")
        info = self._info
        smaps = smaps_range(self.address, self.mapped_bytes)
        huge_bytes = (
            smaps.get("AnonHugePages", 0) + smaps.get("ShmemPmdMapped", 0) + smaps.get("FilePmdMapped", 0)
        )
        coverage = min(1.0, huge_bytes / self.mapped_bytes)
        short = info["huge_pages_requested"] and coverage < WELL_COVERED
        # The allocation's warnings say why pages might be 4 KB; MADV_COLLAPSE may have made them
        # 2 MB regardless (a tmpfs without huge=), so they are shown only when pages came out small.
        warnings = list(info["warnings"]) if short or not info["huge_pages_requested"] else []
        if short and not warnings:
            warnings.append(
                f"only {coverage:.1%} of the range is on 2 MB pages: the kernel found too few free "
                "2 MB blocks at fault time (fragmentation); khugepaged may collapse more later"
            )
        numa_pages, stride = self._numa_pages()
        allowed = info["policy_nodes"]
        placed = [n for n in numa_pages if isinstance(n, int)]
        achieved = "unpopulated" not in numa_pages and all(allowed is None or n in allowed for n in placed)
        if info["policy_requested"] is not None and not achieved:
            warnings.append(f"pages are on nodes {numa_pages}, policy asked for {allowed}")
        handles = self._state.handles
        return {
            "bytes": self.nbytes,
            "mapped_bytes": self.mapped_bytes,
            "registered_bytes": self.mapped_bytes if handles else 0,
            "register_chunks": len(handles),
            "register_seconds": info["register_seconds"],
            "huge_pages_requested": info["huge_pages_requested"],
            "huge_page_coverage": coverage,
            "huge_page_bytes": huge_bytes,
            "numa_pages": numa_pages,
            "numa_sample_stride_pages": stride,
            "policy_requested": info["policy_requested"],
            "policy_achieved": achieved,
            "shared": info["shared"],
            "shared_path": self.shared_path,
            "prefault": info["prefault"],
            "huge_page_collapse": info["collapse"],
            "warnings": warnings,
        }

    def _numa_pages(self) -> tuple[dict, int]:
        """node -> 4 KB pages. Over NUMA_SAMPLE_PAGES pages only every stride-th page is asked
        about and stands for the stride pages from it (a THP's pages share one node anyway)."""
        npages = self.mapped_bytes // PAGE
        stride = max(1, -(-npages // NUMA_SAMPLE_PAGES))
        first = np.arange(0, npages, stride, dtype=np.uint64)
        status = _numa.move_pages_query(self.address + first * PAGE)
        weight = np.minimum(stride, npages - first.astype(np.int64))
        out: dict = {}
        for node in np.unique(status):
            key = int(node) if node >= 0 else "unpopulated"
            out[key] = out.get(key, 0) + int(weight[status == node].sum())
        return out, stride


def _build(address, nbytes, mapped, finalizer, backend, handles, path, owns_file, info) -> HostBuffer:
    backing = (ctypes.c_uint8 * mapped).from_address(address)
    # The mapping is released when `backing` dies: the tensor's storage holds a reference to it.
    finalizer_obj = weakref.finalize(backing, finalizer[0], *finalizer[1:])
    finalizer_obj.atexit = False  # never unmap under live tensors during interpreter shutdown
    try:
        tensor = torch.frombuffer(backing, dtype=torch.uint8, count=nbytes)
        state = _State(backend, handles, path, owns_file, tensor, backing)
        return HostBuffer(
            address=address, nbytes=nbytes, mapped_bytes=mapped,
            finalizer=finalizer_obj, state=state, info=info,
        )  # fmt: skip
    except BaseException:
        finalizer_obj.detach()  # the caller unmaps; a second munmap later could hit a new mapping
        raise


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
    -> (prefault method, collapse outcome: vm.collapse_huge's, or "not requested")."""
    method = populate(address, mapped, fd, fresh)
    if not huge_pages:
        return method, "not requested"
    collapse = collapse_huge(address, mapped)
    if collapse.startswith("failed"):
        warnings.append(f"madvise(MADV_COLLAPSE) {collapse}; part of the range stays on 4 KB pages")
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
    register_chunk_bytes = _check_registration(backend, register_chunk_bytes, mapped, "nbytes")
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
            handles, seconds = _register(backend, address, mapped, register_chunk_bytes)
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
        return _build(address, nbytes, mapped, fin, backend, handles, path, path is not None, info)
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
        register_chunk_bytes = _check_registration(backend, register_chunk_bytes, size, "path")
        if huge_pages and (why := shm.huge_page_warning(os.path.dirname(os.path.abspath(path)))):
            warnings.append(why)
        address, method, collapse = _map_and_prepare(size, fd, bool(huge_pages), None, False, warnings)
        seconds = 0.0
        if backend is not None:
            handles, seconds = _register(backend, address, size, register_chunk_bytes)
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
        return _build(address, size, size, fin, backend, handles, os.fspath(path), False, info)
    except BaseException:
        _undo(backend, handles, address, size, None)  # the file is the creator's: never removed here
        raise
    finally:
        os.close(fd)
