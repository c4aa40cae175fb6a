"""`hicache plan`: how many DMA segments and bytes one pool transfer takes in a host layout."""

from __future__ import annotations

import json
import time

import numpy as np

from hal.transfer.layouts import HOST_LAYOUTS, KVGeometry, parse_dtype
from hal.transfer.plan import plan_pool_transfer

HELP = "count the merged DMA segments of a device<->host pool transfer in a given host layout"


def add_arguments(p) -> None:
    p.add_argument("--layout", required=True, choices=HOST_LAYOUTS)
    p.add_argument("--attention", required=True, choices=("mla", "mha"))
    p.add_argument("--tokens", type=int, required=True, help="tokens to move")
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--kv-dim", type=int, help="MLA latent width (kv_lora_rank + rope dim), e.g. 576")
    p.add_argument("--heads", type=int, help="MHA KV heads")
    p.add_argument("--head-dim", type=int, help="MHA head dim")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--direction", default="d2h", choices=("d2h", "h2d"))
    p.add_argument("--indices", default="contiguous", choices=("contiguous", "random"),
                   help="contiguous slots, or randomly scattered whole pages on both sides")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")


def geometry_from_args(a) -> KVGeometry:
    if a.attention == "mla":
        if a.kv_dim is None:
            raise ValueError("--kv-dim: required for --attention mla")
        return KVGeometry("mla", a.layers, 1, a.kv_dim, parse_dtype(a.dtype), a.page_size)
    if a.heads is None or a.head_dim is None:
        raise ValueError("--heads/--head-dim: required for --attention mha")
    return KVGeometry("mha", a.layers, a.heads, a.head_dim, parse_dtype(a.dtype), a.page_size)


def slot_indices(tokens: int, page_size: int, scattered: bool, rng: np.random.Generator) -> np.ndarray:
    """`tokens` slots in whole pages; scattered picks random pages from a pool twice as large."""
    pages = -(-tokens // page_size)
    order = rng.permutation(2 * pages)[:pages] if scattered else np.arange(pages)
    return (order[:, None] * page_size + np.arange(page_size)).reshape(-1)[:tokens].astype(np.int64)


def run(a) -> int:
    if a.tokens <= 0:
        raise ValueError(f"--tokens: must be positive, got {a.tokens}")
    geom = geometry_from_args(a)
    rng = np.random.default_rng(a.seed)
    scattered = a.indices == "random"
    host = slot_indices(a.tokens, a.page_size, scattered, rng)
    dev = slot_indices(a.tokens, a.page_size, scattered, rng)
    host_size = 2 * (-(-a.tokens // a.page_size)) * a.page_size
    t0 = time.perf_counter()
    plan = plan_pool_transfer(a.layout, geom, host_size, host, dev, a.direction)
    elapsed = time.perf_counter() - t0
    out = {"layout": a.layout, "attention": a.attention, "direction": a.direction, "tokens": a.tokens,
           "page_size": a.page_size, "layers": a.layers, "segments": plan.num_segments, "bytes": plan.nbytes,
           "plan_seconds": elapsed, "indices": a.indices, "dtype": a.dtype}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.layout} {a.attention} {a.direction}: {a.tokens} tokens x {a.layers} layers, page {a.page_size}")
        print(f"  segments {plan.num_segments:,}  bytes {plan.nbytes:,}  "
              f"avg segment {plan.nbytes / max(plan.num_segments, 1):,.0f} B  plan {elapsed * 1e3:.2f} ms")
    return 0
