"""Device and host memory for SGLang's pools, from the HAL.

Host: SGLang's host pools allocate through `ALLOC_MEMORY_FUNCS[device type]` (cudaHostRegister
on a plain tensor by default); `install_host_allocator` sets the "cpu" entry to
hal.memory.host.allocate_host registered with the backend, so the host pool is a HAL HostBuffer.
Device: `device_kv_pool_class` is SGLang's MLA or MHA device pool with its per-layer buffers made
by `backend.alloc_device`, so the backend sees D2H/H2D directions and prices them.
"""

from __future__ import annotations

import math

import torch

from hal.memory.host import allocate_host

# SGLang marks a buffer's registered ranges on it; an empty list: nothing for it to unregister.
_REGISTERED_RANGES_ATTR = "_sglang_cuda_host_registered_ranges"


def host_allocator(backend):
    """An ALLOC_MEMORY_FUNCS entry: a HAL host buffer (registered with `backend`) as a tensor."""

    def allocate(dims, dtype, device, pin_memory, allocator, registration_granularity_bytes=None):
        nbytes = math.prod(dims) * torch.empty(0, dtype=dtype).element_size()
        buf = allocate_host(max(nbytes, 1), huge_pages=False, backend=backend)
        tensor = buf.tensor[:nbytes].view(dtype).view(dims)
        # The HostBuffer unmaps on collection: the tensor SGLang keeps must keep it alive.
        tensor._hal_host_buffer = buf
        setattr(tensor, _REGISTERED_RANGES_ATTR, [])
        return tensor

    return allocate


def install_host_allocator(backend) -> None:
    """Route SGLang's CPU host-pool allocation to hal.memory for this process."""
    from sglang.srt.mem_cache.pool_host import common

    common.ALLOC_MEMORY_FUNCS["cpu"] = host_allocator(backend)


def device_kv_pool_class(backend, attention: str = "mla"):
    """SGLang's MLATokenToKVPool or MHATokenToKVPool whose layer buffers are `backend` device memory."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool

    def zeros(shape, dtype):
        t = backend.alloc_device(shape, dtype)
        t.zero_()
        return t

    class HalMLATokenToKVPool(MLATokenToKVPool):
        """MLATokenToKVPool on the HAL backend's device memory (buffers only; logic upstream's)."""

        def _create_buffers(self):
            self.kv_buffer = [zeros((self.size + self.page_size, 1, self.kv_cache_dim), self.store_dtype)
                              for _ in range(self.layer_num)]

    class HalMHATokenToKVPool(MHATokenToKVPool):
        """MHATokenToKVPool on the HAL backend's device memory: its K and V layer buffers, of the
        shapes upstream's own allocation gives (`_kv_buffer_shapes`), one tensor each (upstream may
        fuse K and V of a layer into one allocation for paged GPU kernels, which nothing here runs)."""

        def _create_buffers_normal(self):
            k_shape, v_shape = self._kv_buffer_shapes()
            self.k_buffer = [zeros(k_shape, self.store_dtype) for _ in range(self.layer_num)]
            self.v_buffer = [zeros(v_shape, self.store_dtype) for _ in range(self.layer_num)]

    return HalMLATokenToKVPool if attention == "mla" else HalMHATokenToKVPool
