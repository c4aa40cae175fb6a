"""CPU buffers that stand for device memory, told apart from host memory by address until freed.

A backend whose "device" is the CPU (emu) hands out device buffers that are plain CPU tensors,
so only their addresses say which side of a copy is the device. Each buffer gets a mapping of
its own (never host heap), and its address is forgotten when the mapping dies, so a host buffer
later placed at the same address is not mistaken for device memory. Only that buffer's own
registration is forgotten: the mapping is unmapped before the finalizer runs (possibly on a
stream thread dropping the last plan that held it), so a newer device buffer may already sit
at the address, and forgetting the address outright would turn it into host memory (its plans
then priced as host-to-host: 0 s). hal.backend.Backend gives every backend this bookkeeping.
"""

from __future__ import annotations

import math
import mmap
import threading
import weakref

import torch


class CpuDeviceMemory:
    """The device buffers one backend made on the CPU: `alloc` makes one, `in` asks."""

    def __init__(self):
        self._storages: dict[int, object] = {}  # storage data_ptr -> the mapping's registration token
        self._lock = threading.Lock()

    def alloc(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        region = mmap.mmap(-1, max(nbytes, 1))
        t = torch.frombuffer(region, dtype=torch.uint8)[:nbytes].view(dtype).view(shape)
        ptr, token = t.untyped_storage().data_ptr(), object()
        with self._lock:
            self._storages[ptr] = token
        weakref.finalize(region, _forget, self._storages, self._lock, ptr, token)
        return t

    def __contains__(self, tensor: torch.Tensor) -> bool:
        return tensor.untyped_storage().data_ptr() in self._storages


def _forget(storages: dict[int, object], lock: threading.Lock, ptr: int, token: object) -> None:
    """A device mapping died: forget its address unless a newer mapping registered it since."""
    with lock:
        if storages.get(ptr) is token:
            del storages[ptr]
