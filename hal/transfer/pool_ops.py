"""Pool-level transfers: a device pool to/from a host pool, through the host layout's op pair.

SGLang's host pools back up all layers at once and load one layer at a time (compute on
layer i waits for layer i only); which kvcacheio op does each is the layout object's
(hal.transfer.layouts), so neither this module nor the reference HiCache names one.
`layout` is a HostLayout or its name everywhere.

Buffers: `host_bufs` is [kv] (MLA) or [k, v] (MHA), each of the layout's per-part shape;
`device_bufs` is [[layer tensors]] (MLA) or [[k layers], [v layers]] (MHA). Pools that
are not materialized are counted and priced through hal.transfer.layer_plans instead.
"""

from __future__ import annotations

import numpy as np
import torch

from hal.transfer import kvcacheio as kv
from hal.transfer.direction import Direction
from hal.transfer.geometry import KVGeometry
from hal.transfer.layout_registry import check_layout
from hal.transfer.plan import TransferPlan, plan_pool_transfer


def _t(a) -> torch.Tensor:
    return a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def backup(layout, geom: KVGeometry, host_bufs, device_bufs, host_indices, device_indices):
    """D2H, all layers: host[layout][host_indices] = device[device_indices]. Returns an Event."""
    layout = _check_buffers(layout, geom, host_bufs, device_bufs)
    return layout.backup(geom, host_bufs, device_bufs, _t(host_indices), _t(device_indices))


def load_layer(layout, geom: KVGeometry, host_bufs, device_bufs, host_indices, device_indices, layer: int):
    """H2D, one layer: device[layer][device_indices] = host[layout][layer][host_indices]."""
    layout = _check_buffers(layout, geom, host_bufs, device_bufs)
    return layout.load_layer(geom, host_bufs, device_bufs, _t(host_indices), _t(device_indices), layer)


def load_all_layers(layout, geom: KVGeometry, host_bufs, device_bufs, host_indices, device_indices) -> list:
    """H2D for every layer, one submission per layer; returns the per-layer events."""
    # Layer 0 goes through the upstream op, which checks every argument. Layers 1.. differ
    # only by buffer and a constant shift, so when their device tensors match layer 0's the
    # rest is planned once and cut per layer instead of re-checked and re-merged 77 times.
    layout = check_layout(layout, geom)
    first = load_layer(layout, geom, host_bufs, device_bufs, host_indices, device_indices, 0)
    rest = range(1, geom.layers)
    if not rest or not _layers_alike(device_bufs):
        return [first] + [load_layer(layout, geom, host_bufs, device_bufs, host_indices, device_indices, layer)
                          for layer in rest]
    plan = plan_pool_transfer(layout, geom, layout.slots(geom, host_bufs[0]), _np(host_indices),
                              _np(device_indices), Direction.H2D, layers=rest, host_bufs=list(host_bufs),
                              device_bufs=[dict(enumerate(part)) for part in device_bufs])
    layer_of = {id(t): layer for part in device_bufs for layer, t in enumerate(part)}
    groups: dict[int, list] = {layer: [] for layer in rest}
    for g in plan.groups:
        groups[layer_of[id(g.dst)]].append(g)
    backend, stream = kv.active_backend(), kv.current_stream()
    return [first] + [backend.execute(TransferPlan(f"load_layer_{layout.name}", groups[layer], Direction.H2D), stream)
                      for layer in rest]


def _np(indices) -> np.ndarray:
    return indices.detach().cpu().numpy() if isinstance(indices, torch.Tensor) else np.asarray(indices, np.int64)


def _layers_alike(device_bufs) -> bool:
    """Every layer's device tensor is a distinct tensor shaped like layer 0's (as checked there)."""
    for part in device_bufs:
        ref = part[0]
        if len({id(t) for t in part}) != len(part):
            return False
        if any(not isinstance(t, torch.Tensor) or t.shape != ref.shape or t.dtype != ref.dtype
               or t.device != ref.device or not t.is_contiguous() for t in part):
            return False
    return True


def _check_buffers(layout, geom: KVGeometry, host_bufs, device_bufs):
    """The checked layout object; ValueError naming the buffers that do not fit `geom`."""
    layout = check_layout(layout, geom)
    for name, bufs in (("host_bufs", host_bufs), ("device_bufs", device_bufs)):
        if not isinstance(bufs, (list, tuple)) or len(bufs) != geom.parts:
            raise ValueError(f"{name}: expected {geom.parts} part(s) ({'k, v' if geom.parts == 2 else 'kv'}), "
                             f"got {bufs!r:.60}; unmaterialized pools go through hal.transfer.layer_plans")
    return layout


def plan_for(layout, geom: KVGeometry, host_size: int, host_indices, device_indices, direction: str,
             layers=None) -> TransferPlan:
    """The plan `backup`/`load_layer` would run, for counting segments and bytes."""
    return plan_pool_transfer(layout, geom, host_size, np.asarray(host_indices), np.asarray(device_indices),
                              direction, layers=layers)
