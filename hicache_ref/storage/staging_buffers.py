"""Reusable staging tensors for the pages a backend cannot move straight from or into the host pool."""

from __future__ import annotations

import threading

import torch

STAGING_KEEP_BYTES = 256 << 20  # free staging kept for reuse per client


class StagingPool:
    """Reusable 1-D uint8 staging tensors by size, shared by a client's threads. A fresh multi-MB
    tensor is page-faulted in on first touch, which costs more than the gather it stages."""

    def __init__(self, keep_bytes: int = STAGING_KEEP_BYTES, on_new=None, on_drop=None):
        self.keep_bytes = keep_bytes
        self._on_new, self._on_drop = on_new, on_drop  # e.g. register a new buffer with the transfer engine
        self._free: dict[int, list[torch.Tensor]] = {}
        self._kept = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int, lease: list) -> torch.Tensor:
        with self._lock:
            bufs = self._free.get(nbytes)
            buf = bufs.pop() if bufs else None
            if buf is not None:
                self._kept -= nbytes
        if buf is None:
            buf = torch.empty(nbytes, dtype=torch.uint8)
            if self._on_new is not None:
                self._on_new(buf)
        lease.append(buf)
        return buf

    def give(self, lease: list) -> None:
        dropped = []
        with self._lock:
            for buf in lease:
                if self._kept + buf.numel() <= self.keep_bytes:
                    self._free.setdefault(buf.numel(), []).append(buf)
                    self._kept += buf.numel()
                else:
                    dropped.append(buf)
        lease.clear()
        if self._on_drop is not None:
            for buf in dropped:
                self._on_drop(buf)

    def clear(self) -> list[torch.Tensor]:
        """Forget every kept buffer; returns them (for a backend to unregister)."""
        with self._lock:
            kept = [b for bufs in self._free.values() for b in bufs]
            self._free, self._kept = {}, 0
        return kept
