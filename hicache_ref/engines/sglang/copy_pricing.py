"""Upstream's copies counted and priced at the spec's geometry, which lets it run on narrow rows.

SGLang's pools are real tensors, so the seed scenario's (a 400K-token L1 and 75 GB of L2 a card at
78 layers x 576) cannot be built on a test machine. Its decisions do not depend on a row's width:
which tokens hit, which pages are backed up, loaded and evicted are the same on a 1-layer row. So
upstream runs on `narrow_spec`'s rows, and every copy it makes is priced as the spec's geometry
would move it: the copy's token indices (what upstream chose) planned by hal.transfer's layer
planner for the spec's layout and geometry, its bytes, segments and launches counted, its modeled
seconds from the backend's link model. The reference prices its count backend's copies the same way.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch

from hal.transfer.direction import POOL_DIRECTIONS, Direction
from hal.transfer.geometry import KVGeometry
from hal.transfer.layer_plans import LayerPlanner
from hal.transfer.layout_registry import get_layout, layout_names
from hal.transfer.plan import TransferPlan
from hicache_ref.core.direction_worker import ExactSeconds

# The rows upstream runs on: one layer (SGLang's MLA pool keeps a 64-wide rope part, so 128 wide).
NARROW = {"mla": dict(layers=1, kv_dim=128), "mha": dict(layers=1, heads=1, kv_dim=8)}
DIRECT_OP = "transfer_kv_direct"  # layer_first under the direct io backend, both directions


def narrow_spec(spec):
    """`spec` on one-layer rows (same capacities, pages, layout and switches)."""
    return spec.replace(**NARROW[spec.geometry.attention])


def op_layouts(attention: str) -> dict[str, str]:
    """kvcacheio op name -> the host layout it moves, for `attention`'s pools."""
    geom = KVGeometry(attention, 1, 1, 128, torch.bfloat16, 1)  # the op names depend on the attention only
    out = {DIRECT_OP: "layer_first"}
    for name in layout_names(attention):
        for op in get_layout(name).ops(geom) or ():  # a layout no upstream op moves: none
            out.setdefault(op, name)
    return out


class FullGeometryPricer:
    """Counts each copy upstream makes as `geom` (the spec's KVGeometry) moves it, into `tallies`
    (a tally.DirectionTally per direction), priced by `backend` as the reference prices a copy:
    a kernel op per token and layer, a direct one per segment, the seconds summed exactly
    (ExactSeconds: the same bits as the reference's controller). On the spec's own rows this
    counts what the executed plans move; on narrow rows, what the spec's rows would."""

    def __init__(self, geom, host_tokens: int, backend, run_layers: int):
        from hicache_ref.engines.sglang.tally import DirectionTally

        if run_layers not in (1, geom.layers):
            raise ValueError(f"run_layers: {run_layers} is neither 1 nor the spec's {geom.layers} layers")
        self.geom, self.host_tokens, self.backend = geom, host_tokens, backend
        self.tallies = {str(d): DirectionTally() for d in POOL_DIRECTIONS}
        self.run_layers = run_layers
        self.layouts = op_layouts(geom.attention)
        self._planners: dict[str, LayerPlanner] = {}
        self._seconds = {str(d): ExactSeconds() for d in POOL_DIRECTIONS}
        self._layer_loads = 0  # per-layer load calls seen: run_layers of them make one load
        self._signatures: dict[str, inspect.Signature] = {}  # per op: bound once a call, made once

    def __call__(self, name: str, op, args, kwargs) -> None:
        """Count one call of kvcacheio op `name` (`op` the HAL function, with its arguments as run)."""
        if name not in self._signatures:
            self._signatures[name] = inspect.signature(op)
        bound = self._signatures[name].bind(*args, **kwargs).arguments
        src_name = next(n for n in bound if n.startswith("src"))
        first = bound[src_name]
        while isinstance(first, (list, tuple)):
            first = first[0]
        direction = Direction.D2H if self.backend.is_device(first) else Direction.H2D
        src, dst = bound["src_indices"], bound["dst_indices"]
        host, device = (dst, src) if direction == Direction.D2H else (src, dst)
        if direction == Direction.H2D:
            # A load is one call a layer, its layers' indices alike: the first call of each counts
            # the whole load (on one-layer rows every call is a whole load), priced as one job of all
            # layers as the reference prices it.
            self._layer_loads += 1
            if (self._layer_loads - 1) % self.run_layers:
                return
        layer0 = self._planner(self.layouts[name]).layer0(direction, _np(host), _np(device))
        layers = self.geom.layers
        launches = 1 if direction == Direction.D2H else layers
        kernel = None if "direct" in name else len(host) * layers  # kernel: per token and layer
        plan = TransferPlan.counted(name, direction, launches, kernel, layer0.nbytes * layers,
                                    layer0.num_segments * layers)
        t = self.tallies[str(direction)]
        t.transfers += 1
        t.bytes += plan.nbytes
        t.segments += plan.num_segments
        t.launches += plan.launches
        seconds = self._seconds[str(direction)]
        seconds.add(self.backend.model_seconds(plan) or 0.0)
        t.modeled_seconds = seconds.value()

    def _planner(self, layout: str) -> LayerPlanner:
        if layout not in self._planners:
            self._planners[layout] = LayerPlanner(layout, self.geom, self.host_tokens)
        return self._planners[layout]


def _np(indices):
    return indices.detach().cpu().numpy().astype(np.int64) if hasattr(indices, "detach") else \
        np.asarray(indices, dtype=np.int64)
