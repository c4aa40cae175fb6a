"""SGLang's UnifiedRadixCache with HiCache, built as its own CPU tests build it, on the HAL.

Server arguments come from the spec (page size, write policy, io backend, host layout); the
device pool is SGLang's MLA pool on the backend's device memory (memory.device_kv_pool_class),
the host pool SGLang's own, sized by its ratio rule so that it holds exactly the spec's L2.
"""

from __future__ import annotations

from hal.transfer.layouts import DTYPES
from hicache_ref.engines.sglang import kernel_shim
from hicache_ref.engines.sglang import l3_objects as storage
from hicache_ref.engines.sglang import pool_memory as memory

ROPE_DIM = 64  # the MLA latent's rope part; the rest of --kv-dim is the lora rank


class UpstreamCache:
    """The built cache, its allocator and the device pool (what the request driver uses)."""

    def __init__(self, cache, allocator, kv_pool, l1: int, l2: int, store=None):
        self.cache, self.allocator, self.kv_pool, self.l1, self.l2 = cache, allocator, kv_pool, l1, l2
        self.store = store  # hicache_ref.engines.sglang.stores.UpstreamStore, or None without an L3

    def close(self) -> None:
        """Stop upstream's controller threads, release its store client, then the host pool its
        client registered."""
        import atexit

        atexit.unregister(self.cache.shutdown)
        self.cache.shutdown()
        if self.store is not None:
            self.store.detach()
        self.cache.release_host_resources()
        kernel_shim.clear_buffers()
        if self.store is not None:
            storage.clear_rank()


def host_ratio(l1: int, l2: int, page_size: int) -> float:
    """The hicache_ratio for which upstream's sizing (ratio x device tokens, floored to pages,
    plus one padding page) gives exactly `l2` host tokens."""
    return (l2 - page_size + 0.5) / l1


def server_args(spec, l1: int, l2: int, store=None):
    """The server's arguments for the spec, resolved as a launch resolves them: upstream's own
    `handle_hicache` (page_first with direct becomes page_first_direct, page_first_direct with
    kernel runs direct, ...), its decisions applied as publishing the arguments applies them."""
    from sglang.srt.arg_groups.hicache_hook import handle_hicache
    from sglang.srt.arg_groups.model_override_base import _declaration_overlay
    from sglang.srt.server_args import ServerArgs

    t = spec.tiers
    args = ServerArgs(model_path="dummy", page_size=spec.page_size, hicache_io_backend=t.io_backend,
                      hicache_mem_layout=t.host_layout, hicache_write_policy=t.write_policy,
                      hicache_ratio=host_ratio(l1, l2, spec.page_size), hicache_size=0,
                      hicache_storage_prefetch_policy="wait_complete", enable_hierarchical_cache=True,
                      **(store.server_fields() if store is not None else {}))
    handle_hicache(args)
    for name, value in _declaration_overlay(args).items():
        setattr(args, name, value)
    return args


def build(spec, backend, l1: int, l2: int, store=None) -> UpstreamCache:
    """Upstream's cache of `l1` device and `l2` host tokens on `backend` (both page multiples),
    attached to `store` (hicache_ref.engines.sglang.stores, opened for spec.storage) when given."""
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    g, ps = spec.geometry, spec.page_size
    missing = kernel_shim.install()
    if missing:
        raise RuntimeError(f"hal.transfer.kvcacheio lacks ops SGLang imports: {', '.join(missing)}")
    memory.install_host_allocator(backend)
    args = server_args(spec, l1, l2, store)
    set_global_server_args_for_scheduler(args)
    dtype = DTYPES[g.dtype]
    pool_class = memory.device_kv_pool_class(backend, g.attention)
    if g.attention == "mla":
        kv_pool = pool_class(size=l1, page_size=ps, dtype=dtype, kv_lora_rank=g.kv_dim - ROPE_DIM,
                             qk_rope_head_dim=ROPE_DIM, layer_num=g.layers, device="cpu", enable_memory_saver=False)
        layer_buffers = kv_pool.kv_buffer
    else:
        kv_pool = pool_class(size=l1, page_size=ps, dtype=dtype, head_num=g.heads, head_dim=g.kv_dim,
                             layer_num=g.layers, device="cpu", enable_memory_saver=False)
        layer_buffers = kv_pool.k_buffer + kv_pool.v_buffer
    if ps == 1:
        allocator = TokenToKVPoolAllocator(size=l1, dtype=dtype, device="cpu", kvcache=kv_pool, need_sort=False)
    else:
        allocator = PagedTokenToKVPoolAllocator(size=l1, page_size=ps, dtype=dtype, device="cpu", kvcache=kv_pool,
                                                need_sort=False)
    req_pool = ReqToTokenPool(size=4, max_context_len=8, device="cpu", enable_memory_saver=False)
    params = CacheInitParams(req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator, page_size=ps,
                             disable=False, tree_components=(ComponentType.FULL,), eviction_policy="lru")
    cache = UnifiedRadixCache(params=params)
    if store is not None:
        storage.stamp_one_rank()
        try:
            with store.attaching():
                cache.init_hicache(args, params)
            store.attach(cache)
        except BaseException:
            storage.clear_rank()
            raise
    else:
        cache.init_hicache(args, params)
    host = cache.cache_controller.mem_pool_host
    kernel_shim.register_buffers(layer_buffers)
    for entry in host.entries:  # SGLang groups its host pools; the KV one is the anchor
        pool = entry.host_pool  # MLA's per-layer views are data_refs, MHA's k_ then v_data_refs
        # Its buffer is registered HAL memory (memory.host_allocator); the pages the storage path
        # makes with pin_memory=True would ask CUDA for pinned memory a CPU box does not have.
        pool.pin_memory = False
        kernel_shim.register_buffers(getattr(pool, "data_refs", None) or pool.k_data_refs + pool.v_data_refs)
    up = UpstreamCache(cache, allocator, kv_pool, l1, l2, store)
    if host.size != l2:
        up.close()
        raise RuntimeError(f"SGLang sized the host pool at {host.size} tokens, not the spec's {l2}")
    return up
