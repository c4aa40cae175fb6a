"""Pools and comparisons shared by the storage suite and the harness tests: small pools filled with
random bits, compared through conformance.suites.transfer_reference (an independent definition of the host layouts)."""

from __future__ import annotations

import numpy as np
import torch

from conformance.suites import transfer_reference
from hal.transfer.layouts import KVGeometry
from hicache_ref.core.pools import HostPool

SPEC_ENV = "HICACHE_STORAGE_SPEC"  # the spec under test, set by `hicache conform --storage SPEC`

# Small geometries worked by hand: MHA 3 layers x 2 heads x 4 dims bf16 (16 bytes/token/layer/part),
# pages of 4 tokens -> a page is 2 parts * 3 layers * 4 tokens * 16 bytes = 384 bytes.
MHA = KVGeometry("mha", 3, 2, 4, torch.bfloat16, 4)
MLA = KVGeometry("mla", 3, 1, 8, torch.float16, 4)  # 3 * 4 * 16 = 192 bytes a page
PAGE_BYTES = {"mha": 384, "mla": 192}
TOKENS = 16  # 4 pages


def host_tensor(pool: HostPool) -> torch.Tensor:
    return torch.stack(pool.buffers) if pool.geom.attention == "mha" else pool.buffers[0]


def logical(pool: HostPool) -> torch.Tensor:
    """(parts, layers, tokens, heads, dim) of the pool, by the reference's own shape math."""
    return transfer_reference.host_to_logical(pool.layout, pool.geom.attention, host_tensor(pool), pool.geom.page_size)


def page_bits(pool: HostPool, page: int) -> torch.Tensor:
    ps = pool.geom.page_size
    return transfer_reference.bits(logical(pool)[:, :, page * ps : (page + 1) * ps])


def random_pool(geom: KVGeometry, layout: str, seed: int) -> HostPool:
    pool = HostPool(geom, TOKENS, layout, materialize=True)
    rng = np.random.default_rng(seed)
    for buf in pool.buffers:
        transfer_reference.fill_random(buf, rng)
    return pool


def poisoned_pool(geom: KVGeometry, layout: str) -> HostPool:
    pool = HostPool(geom, TOKENS, layout, materialize=True)
    for buf in pool.buffers:
        transfer_reference.poison(buf)
    return pool
