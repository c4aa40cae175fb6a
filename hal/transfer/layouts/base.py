"""The host layout contract: what the planner, the pool ops and the io backends ask a layout.

A host layout is one object (one module under hal.transfer.layouts) that owns its shape, its
byte-address math, the kvcacheio op pair that moves a pool in it, its DMA segment rule, the
attention kinds it holds and what it becomes under an io backend. Address math is written
per *piece*: one token of one layer, or a fraction of it where the layout splits items (as
page_head splits them over heads); offsets are those of layer 0 plus a per-layer shift, so
the planner merges once and shifts per layer.
"""

from __future__ import annotations

import numpy as np


class HostLayout:
    """One host pool layout. Subclasses set `name` and implement the address math and ops."""

    name: str = ""
    attentions: tuple[str, ...] = ("mha", "mla")
    # DMA segment rule: True where a page's tokens are consecutive pieces of one part and layer
    # (so runs break only between pages, and the planner may plan whole pages as one piece).
    page_runs: bool = False
    # With the direct io backend, submit (host, device) pairs sorted by host index.
    direct_sorted: bool = False
    # The io backend upstream's copy ops for this layout use (the seed's fix ladder prices each
    # layout with its own: page_first_direct's direct copies, layer_first's transfer kernels).
    native_io_backend: str = "kernel"
    # Whether SGLang's direct io backend moves this layout (0.5.23 moves page_head by kernel only).
    upstream_direct: bool = True
    # Axis order of one part's page as this layout keeps it in memory, over (layer, token, head):
    # what an upstream L3 object written from such a pool holds, byte for byte.
    page_axes: tuple[int, int, int] = (0, 1, 2)

    def shape(self, geom, size: int) -> tuple[int, ...]:
        """Upstream host pool shape for `size` token slots: (2, ...) for MHA (K then V), the
        single part's shape for MLA. `size` is a checked multiple of page_size."""
        raise NotImplementedError

    def pieces(self, geom) -> int:
        """How many pieces one item (one token, one layer, one part) splits into: 1 unless the
        layout scatters an item (page_head: one per head)."""
        return 1

    def piece_offsets(self, geom, size: int, tokens: np.ndarray) -> np.ndarray:
        """Byte offsets of (layer 0, token, piece) in one part of a pool of `size` slots;
        int64, shape (len(tokens), pieces)."""
        raise NotImplementedError

    def layer_shift(self, geom, size: int, layer: int) -> int:
        """Bytes from layer 0's piece to layer `layer`'s, the same for every token and piece."""
        raise NotImplementedError

    def slots(self, geom, part) -> int:
        """Token slots one host part tensor (shaped as `shape` minus the part axis) holds."""
        raise NotImplementedError

    def ops(self, geom) -> tuple[str, str] | None:
        """Names of the kvcacheio ops (all-layer backup D2H, per-layer load H2D) for `geom`;
        None where upstream has no op for this layout (backup and load_layer then run a plan
        made from the address math above)."""
        return None

    def backup(self, geom, host_bufs, device_bufs, host_indices, device_indices, kv=None):
        """D2H, all layers: host[host_indices] = device[device_indices]. Buffers as in
        hal.transfer.pool_ops; returns the copy's Event. `kv`: the op set to call (default
        hal.transfer.kvcacheio; a vendor's kernels behind the same names). This default copies
        by a plan from the layout's address math, on kvcacheio's active backend and stream."""
        return self._plan_copy(geom, host_bufs, device_bufs, host_indices, device_indices, "d2h",
                               range(geom.layers), kv)

    def load_layer(self, geom, host_bufs, device_bufs, host_indices, device_indices, layer: int, kv=None):
        """H2D of one layer; returns the copy's Event (`kv` and the default as in backup)."""
        return self._plan_copy(geom, host_bufs, device_bufs, host_indices, device_indices, "h2d", [layer], kv)

    def _plan_copy(self, geom, host_bufs, device_bufs, host_indices, device_indices, direction, layers, kv):
        from hal.transfer import kvcacheio
        from hal.transfer.kvcheck import Checked, indices
        from hal.transfer.plan import plan_pool_transfer

        if kv is not None and kv is not kvcacheio:
            raise LookupError(f"host layout {self.name}: no upstream op moves it, so no vendor kernel does")
        checked = Checked(**{f"host_bufs[{p}]": b for p, b in enumerate(host_bufs)},
                          **{f"device_bufs[{p}][{i}]": t for p, part in enumerate(device_bufs)
                             for i, t in enumerate(part) if i in layers})
        host_slots, device_slots = self.slots(geom, host_bufs[0]), int(device_bufs[0][0].shape[0])
        if direction == "d2h":
            di, hi = indices(device_indices, host_indices, device_slots, host_slots)
        else:
            hi, di = indices(host_indices, device_indices, host_slots, device_slots)
        plan = plan_pool_transfer(self, geom, host_slots, hi, di, direction, layers=layers, host_bufs=list(host_bufs),
                                  device_bufs=[{i: part[i] for i in layers} for part in device_bufs],
                                  op=f"{direction}_{self.name}")
        backend = kvcacheio.active_backend()
        checked.check_devices(backend)
        return backend.execute(plan, kvcacheio.current_stream())

    def under(self, io_backend: str | None) -> HostLayout:
        """The layout a pool really uses under `io_backend` (hal.transfer.io_backend): itself
        unless the layout is switched for that backend, as upstream switches page_first."""
        return self

    def supports(self, attention: str) -> bool:
        """Whether a pool of this attention kind ("mha", "mla") may use this layout."""
        return attention in self.attentions

    def __repr__(self) -> str:
        return f"<host layout {self.name}>"
