"""KV pools of the reference HiCache: device pool (L1) and host pool (L2).

A pool is a `PageAllocator` plus, with `materialize`, the KV memory in a HAL layout.
On a backend that moves no bytes its buffers are meta tensors, shape without memory.
Pools never move bytes; the controller does, through `hal.transfer.kvcacheio`.
Buffer shapes and ownership: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import math

import torch

from hal.memory import host as memory
from hal.transfer import layouts
from hal.transfer.io_backend import check_io_backend
from hicache_ref.core.allocator import PageAllocator, pages_to_slots, slots_to_pages

__all__ = ["DevicePool", "HostPool", "PageAllocator", "pages_to_slots", "slots_to_pages"]


class DevicePool:
    """L1: device KV slots, one buffer per (part, layer) when materialized."""

    def __init__(self, geom: layouts.KVGeometry, num_tokens: int, backend=None, materialize: bool = False,
                 order: str = "fifo"):
        self.allocator = PageAllocator(num_tokens, geom.page_size, order)  # checks num_tokens and order
        self.geom = geom
        self.num_tokens = num_tokens
        self.backend = backend
        self.buffers: list[list[torch.Tensor]] | None = None
        if materialize:
            shape = layouts.device_shape(geom, num_tokens)
            alloc = backend.alloc_device if backend is not None else (lambda s, d: torch.zeros(s, dtype=d))
            self.buffers = [[alloc(shape, geom.dtype) for _ in range(geom.layers)] for _ in range(geom.parts)]

    @property
    def page_size(self) -> int:
        return self.geom.page_size

    def close(self) -> None:
        self.buffers = None


class HostPool:
    """L2: host KV slots in one of the HAL host layouts (`layout`; with io_backend "direct",
    page_first is used as page_first_direct, as upstream does)."""

    def __init__(self, geom: layouts.KVGeometry, num_tokens: int, layout: str, backend=None,
                 materialize: bool = False, order: str = "fifo", host_buffer=None, host_options: dict | None = None,
                 io_backend: str | None = None):
        self.allocator = PageAllocator(num_tokens, geom.page_size, order)  # checks num_tokens and order
        given = layouts.check_layout(layout, geom)
        check_io_backend("io_backend", io_backend)
        self.geom = geom
        self.num_tokens = num_tokens
        # How KV is moved in and out (hal.transfer.io_backend; None: the seed's planning), and
        # the layout as given vs as used (the layout's `under`: direct turns page_first into
        # page_first_direct). `host_layout` is the used layout's object, `layout` its name.
        self.io_backend = io_backend
        self.given_layout = given.name
        self.host_layout = given.under(io_backend)
        self.layout = self.host_layout.name
        self.backend = backend
        self.shape = layouts.host_shape(self.host_layout, geom, num_tokens)
        self.nbytes = math.prod(self.shape) * geom.elem_size
        self.buffers: list[torch.Tensor] | None = None
        self.host_buffer = None
        self._owns_buffer = False
        if materialize and host_buffer is None and backend is not None and not backend.capabilities().moves_bytes:
            whole = torch.empty(self.shape, dtype=geom.dtype, device="meta")  # priced, never touched
            self.buffers = [whole[p] for p in range(geom.parts)] if geom.attention == "mha" else [whole]
        elif materialize or host_buffer is not None:
            if host_buffer is None:
                host_buffer = self._allocate(host_options or {})
                self._owns_buffer = host_buffer is not None
            self.host_buffer = host_buffer
            flat = host_buffer.tensor if host_buffer is not None else torch.empty(0, dtype=torch.uint8)  # 0 bytes
            if flat.dtype != torch.uint8 or flat.dim() != 1 or flat.numel() < self.nbytes:
                raise ValueError(f"host_buffer: needs a 1-D uint8 tensor of at least {self.nbytes} bytes, "
                                 f"got {layouts.layout_signature(flat)}")
            whole = flat[: self.nbytes].view(geom.dtype).view(self.shape)
            self.buffers = [whole[p] for p in range(geom.parts)] if geom.attention == "mha" else [whole]

    def _allocate(self, options: dict):
        """A HostBuffer (hal.memory.host_buffer) from hal.memory.host; None for a pool of no bytes (nothing to map)."""
        if self.nbytes == 0:
            return None
        return memory.allocate_host(self.nbytes, backend=self.backend, **options)

    @property
    def page_size(self) -> int:
        return self.geom.page_size

    def close(self) -> None:
        """Drop the views and release memory this pool allocated (not a caller's host_buffer)."""
        self.buffers = None
        if self._owns_buffer and self.host_buffer is not None:
            self.host_buffer.close()
        self.host_buffer = None
        self._owns_buffer = False
