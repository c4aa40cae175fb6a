"""HostBuffer: a mapped host range, what close() releases, and its measured report.

allocate_host and attach_host (hal.memory.host) make the mapping; this module wraps it. The
tensor over it keeps the memory mapped while any view lives, close() unregisters and unlinks,
and report() measures what the kernel gave: 2 MB page coverage from smaps, each page's node
from move_pages (sampled on large buffers).
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any

import numpy as np
import torch

from hal.memory import numa as _numa
from hal.memory.registration import release
from hal.memory.vm import PAGE, WELL_COVERED, smaps_range

# move_pages is asked about at most this many pages; bigger buffers are sampled evenly.
NUMA_SAMPLE_PAGES = 1 << 16


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


def build_buffer(address, nbytes, mapped, finalizer, backend, handles, path, owns_file, info) -> HostBuffer:
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
