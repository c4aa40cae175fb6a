"""`hicache plan`: how many DMA segments and bytes one pool transfer takes in a host layout."""

from __future__ import annotations

import json
import time

import numpy as np

from conformance.cli import args as types
from conformance.cli.budget import refuse_over
from conformance.cli.errors import CliError
from hal.transfer.layouts import HOST_LAYOUTS, KVGeometry, parse_dtype
from hal.transfer.plan import plan_pool_transfer
from hal.units import HELP as UNITS

HELP = "count the merged DMA segments of a device<->host pool transfer in a given host layout"


def add_arguments(p) -> None:
    p.add_argument("--layout", required=True, choices=HOST_LAYOUTS)
    p.add_argument("--attention", required=True, choices=("mla", "mha"))
    p.add_argument("--tokens", type=types.size(), required=True, help=f"tokens to move, e.g. 32K ({UNITS})")
    p.add_argument("--page-size", type=types.page_size, default=64,
                   help=f"tokens per page (at most {types.MAX_PAGE_SIZE:,})")
    p.add_argument("--layers", type=types.layers, required=True, help=f"at most {types.MAX_LAYERS:,}")
    p.add_argument("--kv-dim", type=types.dim, help="MLA latent width (kv_lora_rank + rope dim), e.g. 576; "
                   "with --attention mha an alias of --head-dim (replay's spelling)")
    p.add_argument("--heads", type=types.heads, help="MHA KV heads")
    p.add_argument("--head-dim", type=types.dim, help="MHA head dim (the name here; --kv-dim is accepted as its alias)")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--direction", default="d2h", choices=("d2h", "h2d"))
    p.add_argument("--indices", default="contiguous", choices=("contiguous", "random"),
                   help="contiguous slots, or randomly scattered whole pages on both sides")
    p.add_argument("--seed", type=types.count(0), default=0)
    p.add_argument("--json", action="store_true")


def geometry_from_args(a) -> KVGeometry:
    if a.attention == "mla":
        if a.kv_dim is None:
            raise CliError("--kv-dim", "required for --attention mla")
        for option, value in (("--heads", a.heads), ("--head-dim", a.head_dim)):
            if value is not None:  # replay refuses the same: MLA keeps one latent row per token
                raise CliError(option, "is for --attention mha; MLA has one latent KV row per token (--kv-dim)")
        return KVGeometry("mla", a.layers, 1, a.kv_dim, parse_dtype(a.dtype), a.page_size)
    if a.kv_dim is not None and a.head_dim is not None:
        raise CliError("--kv-dim", "with --attention mha it is an alias of --head-dim: give one of them")
    head_dim = a.head_dim if a.head_dim is not None else a.kv_dim  # --kv-dim: replay's name for it
    if a.heads is None or head_dim is None:
        raise CliError("--heads/--head-dim", "required for --attention mha")
    return KVGeometry("mha", a.layers, a.heads, head_dim, parse_dtype(a.dtype), a.page_size)


def slot_indices(tokens: int, page_size: int, scattered: bool, rng: np.random.Generator) -> np.ndarray:
    """`tokens` slots in whole pages; scattered picks random pages from a pool twice as large."""
    pages = -(-tokens // page_size)
    order = rng.permutation(2 * pages)[:pages] if scattered else np.arange(pages)
    return (order[:, None] * page_size + np.arange(page_size)).reshape(-1)[:tokens].astype(np.int64)


# Bytes per planned item, measured on 4M-token plans (peak RSS over the interpreter's):
# slot and index arrays per token, and one merged segment's offsets and length.
INDEX_BYTES_PER_TOKEN = 48
SEGMENT_BYTES = 16


def estimated_bytes(layout: str, geom: KVGeometry, tokens: int, page_size: int) -> int:
    """A lower bound on what planning `tokens` slots allocates: index arrays for whole pages on
    both sides, and the segments (per token and layer in page_first/page_head, else per page)."""
    pages = -(-tokens // page_size)
    per_layer = geom.parts * (geom.heads if layout == "page_head" else 1)
    units = pages * page_size if layout in ("page_first", "page_head") else pages
    return 2 * pages * page_size * INDEX_BYTES_PER_TOKEN + units * geom.layers * per_layer * SEGMENT_BYTES


def run(a) -> int:
    geom = geometry_from_args(a)
    refuse_over("--tokens" if a.tokens >= a.page_size else "--page-size",
                estimated_bytes(a.layout, geom, a.tokens, a.page_size),
                f"index arrays and segments of {a.tokens:,} tokens x {a.layers} layers in {a.layout}")
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
