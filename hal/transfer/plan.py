"""Transfer plans: (op, layouts, indices) -> merged byte segments, the DMA descriptor list.

The cost driver on P800 is the number of descriptors, so a plan merges every run of
pieces that is contiguous on both sides. All work is vectorized over tokens; the merge is
computed once and shifted per layer, which is valid because every layout in
`hal.transfer.layouts` places layer l at a constant byte offset from layer 0 (or in its own buffer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from hal.transfer.direction import POOL_DIRECTIONS, Direction


class Segments(NamedTuple):
    src_offsets: np.ndarray  # int64 byte offsets into src
    dst_offsets: np.ndarray
    nbytes: np.ndarray


class CountedSegments(NamedTuple):
    """Segments known by their number and total bytes only: all a link model prices, for a run
    that moves no bytes (hal's count backend). A group of these prices; it cannot run."""

    total_bytes: int
    number: int


class CopyGroup(NamedTuple):
    """Segments between one source buffer and one destination buffer."""

    src: Any  # a tensor, or a symbolic key when the plan is built without memory
    dst: Any
    segments: Segments | CountedSegments


COUNTED = ("counted",)  # the symbolic buffer of a counted group


@dataclass
class TransferPlan:
    """Copy groups of one submission. Moved and priced runs share it: a priced plan's groups
    hold CountedSegments (built by `counted`), a moved one's the segment arrays."""

    op: str
    groups: list[CopyGroup] = field(default_factory=list)
    direction: Direction | str = "?"  # a Direction once known: set by the planner, or by the backend from the buffers
    launches: int = 1  # submissions this plan stands for (a symbolic all-layer load counts one per layer)
    # None: a direct copy, priced per merged segment. An int: a kernel copy of that many
    # token-layer items (hal.transfer.io_backend), priced per item with no descriptors.
    kernel_items: int | None = None

    @classmethod
    def counted(cls, op: str, direction: Direction | str, launches: int, kernel_items: int | None,
                nbytes: int, segments: int) -> TransferPlan:
        """A plan of one counted group: `segments` segments of `nbytes` bytes in all, priced as
        the plan it stands for (the link model is linear in bytes, segments and launches)."""
        return cls(op, [CopyGroup(COUNTED, COUNTED, CountedSegments(nbytes, segments))], direction, launches,
                   kernel_items)

    @property
    def totals(self) -> tuple[int, int] | None:
        """(bytes, segments) of a counted plan (one that only prices); None for one that can run."""
        if any(isinstance(g.segments, CountedSegments) for g in self.groups):
            return self.nbytes, self.num_segments
        return None

    @property
    def num_segments(self) -> int:
        return sum(g.segments.number if isinstance(g.segments, CountedSegments) else len(g.segments.nbytes)
                   for g in self.groups)

    @property
    def nbytes(self) -> int:
        return sum(g.segments.total_bytes if isinstance(g.segments, CountedSegments)
                   else int(g.segments.nbytes.sum()) for g in self.groups)


def merge_runs(src_off: np.ndarray, dst_off: np.ndarray, piece_bytes: int) -> Segments:
    """Merge equal-size pieces, in order, into maximal runs contiguous on both sides."""
    n = len(src_off)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Segments(empty, empty, empty)
    brk = np.ones(n, dtype=bool)
    if n > 1:
        brk[1:] = (np.diff(src_off) != piece_bytes) | (np.diff(dst_off) != piece_bytes)
    starts = np.flatnonzero(brk)
    lengths = np.diff(np.append(starts, n)) * piece_bytes
    return Segments(src_off[starts].astype(np.int64), dst_off[starts].astype(np.int64), lengths.astype(np.int64))


def shifted(seg: Segments, src_shift: int, dst_shift: int) -> Segments:
    if src_shift == 0 and dst_shift == 0:
        return seg
    return Segments(seg.src_offsets + src_shift, seg.dst_offsets + dst_shift, seg.nbytes)


def stacked_groups(base: Segments, pairs: list[tuple[Any, Any, int, int]]) -> list[CopyGroup]:
    """One group per (src, dst, src_shift, dst_shift), all sharing `base`'s run structure.

    Groups with the same (src, dst) buffers are concatenated so a backend sees one
    descriptor list per buffer pair (e.g. all layers of a host layer_first pool).
    """
    out: dict[tuple[int, int], list] = {}
    order: list[tuple[int, int]] = []
    for src, dst, s_shift, d_shift in pairs:
        key = (id(src), id(dst))
        if key not in out:
            out[key] = [src, dst, []]
            order.append(key)
        out[key][2].append(shifted(base, s_shift, d_shift))
    groups = []
    for key in order:
        src, dst, segs = out[key]
        if len(segs) == 1:
            groups.append(CopyGroup(src, dst, segs[0]))
        else:
            groups.append(
                CopyGroup(
                    src,
                    dst,
                    Segments(*(np.concatenate([getattr(s, f) for s in segs]) for f in Segments._fields)),
                )
            )
    return groups


class Side(NamedTuple):
    """One end of a copy: a host layout over one buffer per part, or one buffer per layer.

    layout: a host layout (a hal.transfer.layouts HostLayout, or its name) or LAYER_BUFFERS
    (device pool, or upstream's per-layer pointer tables). bufs[part] is the part's buffer
    for a host layout, or a {layer: buffer} dict for LAYER_BUFFERS. size: token slots per part.
    """

    layout: Any
    bufs: list
    size: int


LAYER_BUFFERS = "layer_buffers"  # a Side of one buffer per layer (and part): no host layout


def _host_layout(side: Side):
    from hal.transfer.layout_registry import get_layout

    return None if side.layout == LAYER_BUFFERS else get_layout(side.layout)


def _side_offsets(side: Side, host, geom, tokens: np.ndarray, pieces: int) -> np.ndarray:
    from hal.transfer.geometry import device_offsets

    if host is None:
        return device_offsets(geom, tokens, pieces)
    return host.piece_offsets(geom, side.size, tokens)


def _side_at(side: Side, host, geom, part: int, layer: int) -> tuple[Any, int]:
    if host is None:
        return side.bufs[part][layer], 0
    return side.bufs[part], host.layer_shift(geom, side.size, layer)


def plan_copy(op: str, geom, src: Side, dst: Side, src_tokens, dst_tokens, layers) -> TransferPlan:
    """Plan dst[layer, dst_tokens] = src[layer, src_tokens] for every layer and K/V part."""
    s_host, d_host = _host_layout(src), _host_layout(dst)
    # Both sides are cut in the host side's pieces (a device item is contiguous either way).
    pieces = max(h.pieces(geom) for h in (s_host, d_host) if h is not None) if (s_host or d_host) else 1
    so = _side_offsets(src, s_host, geom, np.asarray(src_tokens), pieces).reshape(-1)
    do = _side_offsets(dst, d_host, geom, np.asarray(dst_tokens), pieces).reshape(-1)
    base = merge_runs(so, do, geom.item_size // pieces)
    pairs = []
    for part in range(len(src.bufs)):
        for layer in layers:
            s_buf, s_shift = _side_at(src, s_host, geom, part, layer)
            d_buf, d_shift = _side_at(dst, d_host, geom, part, layer)
            pairs.append((s_buf, d_buf, s_shift, d_shift))
    return TransferPlan(op, stacked_groups(base, pairs))


def plan_pool_transfer(layout, geom, host_size: int, host_tokens, device_tokens, direction: Direction | str,
                       layers=None, host_bufs=None, device_bufs=None, op: str | None = None) -> TransferPlan:
    """Plan a device pool <-> host pool transfer without needing memory (symbolic buffers).

    layout: a host layout or its name. direction: "d2h" (backup) or "h2d" (load). Buffers
    default to symbolic keys, which is enough for counting segments and bytes (`hicache
    plan`, replay without materialization).
    """
    from hal.transfer.layout_registry import check_layout

    layout = check_layout(layout, geom)
    if direction not in POOL_DIRECTIONS:
        raise ValueError(f"direction: {direction!r} is not 'd2h' or 'h2d'")
    direction = Direction(direction)
    layers = range(geom.layers) if layers is None else layers
    parts = range(geom.parts)
    host_bufs = host_bufs or [("host", p) for p in parts]
    device_bufs = device_bufs or [{layer: ("device", p, layer) for layer in layers} for p in parts]
    host = Side(layout, list(host_bufs), host_size)
    dev = Side(LAYER_BUFFERS, list(device_bufs), 0)
    if direction == Direction.D2H:
        plan = plan_copy(op or f"d2h_{layout.name}", geom, dev, host, device_tokens, host_tokens, layers)
    else:
        plan = plan_copy(op or f"h2d_{layout.name}", geom, host, dev, host_tokens, device_tokens, layers)
    plan.direction = direction
    return plan


def check_group(op: str, i: int, g: CopyGroup) -> None:
    """Refuse a group a copy engine cannot run safely: engines trust plans, so a bad one
    must fail here (ValueError naming the group), not corrupt memory."""
    import torch

    seg = g.segments
    if isinstance(seg, CountedSegments):
        raise ValueError(f"plan {op}: groups[{i}] is counted only (no segments): it prices a run, it cannot move one")
    if not len(seg.src_offsets) == len(seg.dst_offsets) == len(seg.nbytes):
        raise ValueError(f"plan {op}: groups[{i}] has offset and length arrays of different sizes")
    if len(seg.nbytes) and int(seg.nbytes.min()) <= 0:
        raise ValueError(f"plan {op}: groups[{i}] has a segment of {int(seg.nbytes.min())} bytes")
    for name, t, off in (("src", g.src, seg.src_offsets), ("dst", g.dst, seg.dst_offsets)):
        where = f"plan {op}: groups[{i}].{name}"
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{where} is {t!r}, not a tensor (a plan built without memory cannot run)")
        if not t.is_contiguous():
            raise ValueError(f"{where} is not contiguous")
        size = t.numel() * t.element_size()
        if len(off) and (int(off.min()) < 0 or int((off + seg.nbytes).max()) > size):
            raise ValueError(f"{where}: a segment falls outside the {size}-byte buffer")
