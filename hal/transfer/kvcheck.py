"""Argument checks for hal.transfer.kvcacheio: every error names the argument and fires before any byte moves."""

from __future__ import annotations

import numpy as np
import torch

from hal.common.arg_checks import is_int, positive_int
from hal.transfer.geometry import KVGeometry


def _is_tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: tensor must be contiguous (shape {tuple(t.shape)}, stride {t.stride()})")
    return t


class Checked:
    """The named KV tensors of one call: same dtype everywhere, one device per side."""

    def __init__(self, **named):
        self.named: dict[str, torch.Tensor] = {}
        self.add(**named)

    @classmethod
    def layer_lists(cls, num_layers: int | None, **lists) -> Checked:
        if num_layers is not None:
            num_layers = positive_int("num_layers", num_layers)
        c = cls()
        for name, ts in lists.items():
            if not isinstance(ts, (list, tuple)) or not ts:
                raise ValueError(f"{name}: expected a non-empty list of per-layer tensors, got {type(ts).__name__}")
            if num_layers is not None and len(ts) != num_layers:
                raise ValueError(f"{name}: {len(ts)} tensors, num_layers is {num_layers}")
            c.add(**{f"{name}[{i}]": t for i, t in enumerate(ts)})
        return c

    def add(self, **named) -> None:
        for name, t in named.items():
            _is_tensor(name, t)
            if self.named:
                first_name, first = next(iter(self.named.items()))
                if t.dtype != first.dtype:
                    raise ValueError(f"{name}: dtype {t.dtype} does not match {first_name} dtype {first.dtype}")
            self.named[name] = t
        for side in ("src", "dst"):
            devs = {(n, t.device) for n, t in self.named.items() if n.startswith(side)}
            if len({d for _, d in devs}) > 1:
                desc = ", ".join(f"{n} on {d}" for n, d in sorted(devs, key=str))
                raise ValueError(f"{side}: tensors on different devices ({desc})")

    def items(self):
        return self.named.items()

    def row_bytes(self, name: str, tensors) -> int:
        rows = {t.stride(0) * t.element_size() if t.dim() > 1 else t.element_size() for t in tensors}
        if len(rows) != 1:
            raise ValueError(f"{name}: per-layer tensors disagree on bytes per token ({sorted(rows)})")
        return rows.pop()

    def check_devices(self, backend) -> None:
        allowed = {"cpu", backend.device_type}
        for name, t in self.named.items():
            if t.device.type not in allowed:
                raise ValueError(f"{name}: on device {t.device}, backend {backend.name!r} uses {sorted(allowed)}")


ITEM_ALIGN = 8  # bytes: upstream's copy kernels move a token's row of a layer in 8-byte words


def geometry(attention: str, layers: int, item_size, ref: torch.Tensor, page_size: int = 1,
             head_num: int = 1) -> KVGeometry:
    item_size = positive_int("item_size", item_size)
    if item_size % ITEM_ALIGN:
        raise ValueError(f"item_size: {item_size} is not a multiple of {ITEM_ALIGN} bytes (as upstream requires)")
    page_size = positive_int("page_size", page_size)
    if not is_int(head_num) or head_num <= 0 or item_size % head_num:
        raise ValueError(f"head_num: {head_num!r} does not divide item_size {item_size}")
    head_num = int(head_num)
    es = ref.element_size()
    if (item_size // head_num) % es:
        raise ValueError(f"item_size: {item_size} bytes per token is not a whole number of {ref.dtype} heads")
    heads = head_num if attention == "mha" else 1
    return KVGeometry(attention, layers, heads, item_size // es // heads, ref.dtype, page_size)


def slots_of(name: str, t: torch.Tensor, row_bytes: int, rows_per_dim0: int = 1) -> int:
    """Token slots in `t`, checking that its rows are `row_bytes` long (item_size/layout_dim match)."""
    nbytes = t.numel() * t.element_size()
    if t.dim() > 1 and t.stride(0) * t.element_size() != row_bytes * rows_per_dim0:
        raise ValueError(f"{name}: {t.stride(0) * t.element_size()} bytes per dim-0 entry (shape "
                         f"{tuple(t.shape)}), expected {row_bytes * rows_per_dim0}: item_size or layout_dim does not match")
    if nbytes % row_bytes:
        raise ValueError(f"{name}: {nbytes} bytes is not a whole number of {row_bytes}-byte tokens")
    return nbytes // row_bytes


def min_slots(names, tensors, row_bytes: int, rows_per_dim0: int = 1) -> int:
    """Fewest token slots over `tensors` (a per-layer list named `names`, or parallel names)."""
    if isinstance(names, str):
        names = [f"{names}[{i}]" for i in range(len(tensors))]
    return min(slots_of(n, t, row_bytes, rows_per_dim0) for n, t in zip(names, tensors, strict=True))


def _index_array(name: str, t) -> np.ndarray:
    if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.dtype != torch.int64:
        desc = f"{t.dtype} of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name}: expected a 1-D int64 tensor, got {desc}")
    return t.detach().cpu().numpy()


def indices(src_indices, dst_indices, src_slots: int, dst_slots: int, page_size: int | None = None):
    si, di = _index_array("src_indices", src_indices), _index_array("dst_indices", dst_indices)
    if len(si) != len(di):
        raise ValueError(f"dst_indices: length {len(di)} does not match src_indices length {len(si)}")
    if page_size is not None and len(si) % page_size:
        raise ValueError(f"src_indices: {len(si)} indices is not a whole number of pages of {page_size}")
    for name, a, n in (("src_indices", si, src_slots), ("dst_indices", di, dst_slots)):
        if len(a) and (int(a.min()) < 0 or int(a.max()) >= n):
            bad = int(a.min()) if int(a.min()) < 0 else int(a.max())
            raise ValueError(f"{name}: index {bad} is outside [0, {n})")
    ordered = np.sort(di)  # cheaper than np.unique's hashing on the per-layer hot path
    if len(di) > 1 and (ordered[1:] == ordered[:-1]).any():
        raise ValueError("dst_indices: duplicate destination indices (two sources would race for one slot)")
    return si, di


def page_tokens(src_indices, dst_indices, page_size: int, src_slots: int, dst_slots: int, host_side: str):
    """Indices of page ops: whole pages of consecutive slots, host pages page-aligned."""
    si, di = indices(src_indices, dst_indices, src_slots, dst_slots, page_size=page_size)
    for name, a in (("src_indices", si), ("dst_indices", di)):
        pages = a.reshape(-1, page_size)
        if page_size > 1 and (np.diff(pages, axis=1) != 1).any():
            bad = int(np.flatnonzero((np.diff(pages, axis=1) != 1).any(axis=1))[0])
            raise ValueError(f"{name}: page {bad} is not {page_size} consecutive slots")
        if name.startswith(host_side) and len(a) and (pages[:, 0] % page_size).any():
            bad = int(np.flatnonzero(pages[:, 0] % page_size)[0])
            raise ValueError(f"{name}: page {bad} starts at slot {int(pages[bad, 0])}, not a multiple of page_size {page_size}")
    return si, di
