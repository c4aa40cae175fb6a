"""Segments as rows: a segment list becomes dst_rows[dst_idx] = src_rows[src_idx] index ops.

Used where one index op beats a call per segment (torch's CPU fallback in hal.transfer.segcopy, and
device-side gathers in hal.backends.support.cudalike). The row is the largest size dividing every
offset and length, so scattered whole pages become one row each.
"""

from __future__ import annotations

import numpy as np
import torch

from hal.transfer.plan import Segments

_ROW_TYPES = ((8, torch.int64), (4, torch.int32), (2, torch.int16), (1, torch.uint8))


def row_unit(seg: Segments) -> int:
    """Largest row size in bytes dividing every offset and length of `seg` (0 when empty)."""
    parts = [np.asarray(a, dtype=np.int64).ravel() for a in seg]
    return int(np.gcd.reduce(np.concatenate(parts))) if parts[2].size else 0


def row_dtype(unit: int, *byte_starts: int) -> torch.dtype:
    """Widest integer type whose size divides `unit` and every buffer's byte start.

    Wider rows mean fewer index-op elements; view(dtype) needs the storage offset aligned and
    device kernels need the address aligned, so pass both.
    """
    for size, dtype in _ROW_TYPES:
        if unit % size == 0 and all(s % size == 0 for s in byte_starts):
            return dtype
    raise AssertionError("uint8 divides everything")


def row_indices(byte_offsets, nbytes, unit: int) -> np.ndarray:
    """Indices of the `unit`-byte rows that segments [off, off + n) cover, in segment order."""
    starts = np.asarray(byte_offsets, dtype=np.int64) // unit
    counts = np.asarray(nbytes, dtype=np.int64) // unit
    first_out = np.cumsum(counts) - counts  # where each segment's rows begin in the output
    return np.repeat(starts - first_out, counts) + np.arange(int(counts.sum()), dtype=np.int64)


def flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor as a 1-D uint8 view starting at its data_ptr()."""
    return t.view(-1).view(torch.uint8)


def byte_rows(flat: torch.Tensor, unit: int, dtype: torch.dtype) -> torch.Tensor:
    """`flat` (uint8) as rows of `unit` bytes; a tail shorter than a row is left out."""
    size = torch.empty((), dtype=dtype).element_size()
    usable = flat.numel() // unit * unit
    return flat[:usable].view(dtype).view(-1, unit // size)


def row_views(src: torch.Tensor, dst: torch.Tensor, seg: Segments):
    """(src_rows, dst_rows, src_idx, dst_idx) such that dst_rows[dst_idx] = src_rows[src_idx]
    performs every segment of `seg`; src/dst are flat uint8 views (see flat_bytes)."""
    unit = row_unit(seg)
    dtype = row_dtype(unit, src.storage_offset(), dst.storage_offset(), src.data_ptr(), dst.data_ptr())
    return (byte_rows(src, unit, dtype), byte_rows(dst, unit, dtype),
            row_indices(seg.src_offsets, seg.nbytes, unit), row_indices(seg.dst_offsets, seg.nbytes, unit))


