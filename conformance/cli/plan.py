"""`hicache plan`: how many DMA segments and bytes one pool transfer takes in a host layout."""

from __future__ import annotations

import json
import time

import numpy as np

from conformance.common import args as types
from conformance.common.spec_options import add_spec_options, spec_from_args
from hal.common.units import HELP as UNITS
from hal.memory.budget import refuse_over
from hal.transfer.plan import plan_pool_transfer
from hal.transfer.slots import planned_bytes, scattered_pool_slots, slot_indices

HELP = "count the merged DMA segments of a device<->host pool transfer in a given host layout"


def add_arguments(p) -> None:
    add_spec_options(p, "plan")  # the geometry and host layout, as every command spells them
    p.add_argument("--tokens", type=types.size(), required=True, help=f"tokens to move, e.g. 32K ({UNITS})")
    p.add_argument("--direction", default="d2h", choices=("d2h", "h2d"), help="device to host (backup) or back (load)")
    p.add_argument("--indices", default="contiguous", choices=("contiguous", "random"),
                   help="contiguous slots, or randomly scattered whole pages on both sides")
    p.add_argument("--seed", type=types.count(0), default=0, help="seed of the random --indices")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run(a) -> int:
    spec = spec_from_args(a, "plan")
    layout, geom = spec.tiers.host_layout, spec.geometry.kv()
    a.page_size, a.layers, a.attention, a.dtype = geom.page_size, geom.layers, geom.attention, spec.geometry.dtype
    refuse_over("--tokens" if a.tokens >= a.page_size else "--page-size",
                planned_bytes(layout, geom, a.tokens, a.page_size),
                f"index arrays and segments of {a.tokens:,} tokens x {a.layers} layers in {layout}")
    rng = np.random.default_rng(a.seed)
    scattered = a.indices == "random"
    host = slot_indices(a.tokens, a.page_size, scattered, rng)
    dev = slot_indices(a.tokens, a.page_size, scattered, rng)
    t0 = time.perf_counter()
    plan = plan_pool_transfer(layout, geom, scattered_pool_slots(a.tokens, a.page_size), host, dev, a.direction)
    elapsed = time.perf_counter() - t0
    out = {"layout": layout, "attention": a.attention, "direction": a.direction, "tokens": a.tokens,
           "page_size": a.page_size, "layers": a.layers, "segments": plan.num_segments, "bytes": plan.nbytes,
           "plan_seconds": elapsed, "indices": a.indices, "dtype": a.dtype}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{layout} {a.attention} {a.direction}: {a.tokens} tokens x {a.layers} layers, page {a.page_size}")
        print(f"  segments {plan.num_segments:,}  bytes {plan.nbytes:,}  "
              f"avg segment {plan.nbytes / max(plan.num_segments, 1):,.0f} B  plan {elapsed * 1e3:.2f} ms")
    return 0
