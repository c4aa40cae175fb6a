"""Segment copy engine: the native path and the torch fallback copy exactly the planned bytes."""

import numpy as np
import pytest
import torch

from hal.transfer import segcopy
from hal.transfer.plan import CopyGroup, Segments


def _random_segments(rng, size, n, unit):
    slots = size // unit
    src = rng.permutation(slots)[:n] * unit
    dst = rng.permutation(slots)[:n] * unit
    lens = np.full(n, unit, dtype=np.int64)
    return Segments(src.astype(np.int64), dst.astype(np.int64), lens)


def _expected(src, dst, seg):
    out = dst.clone()
    for s, d, n in zip(seg.src_offsets.tolist(), seg.dst_offsets.tolist(), seg.nbytes.tolist(), strict=True):
        out[d:d + n] = src[s:s + n]
    return out


def test_native_engine_builds_here():
    assert segcopy.engine() == "native"


def test_native_and_torch_paths_match_reference():
    rng = np.random.default_rng(1)
    for unit in (8, 24, 4096, 3):
        src = torch.from_numpy(rng.integers(0, 255, 1 << 16, dtype=np.uint8))
        seg = _random_segments(rng, 1 << 16, 200 if unit < 4096 else 10, unit)
        want = _expected(src, torch.zeros_like(src), seg)
        a = torch.zeros_like(src)
        segcopy.copy_groups([CopyGroup(src, a, seg)])
        b = torch.zeros_like(src)
        segcopy._torch_group(src, b, seg.src_offsets, seg.dst_offsets, seg.nbytes)
        assert torch.equal(a, want) and torch.equal(b, want)


def test_parallel_split_covers_every_segment():
    rng = np.random.default_rng(2)
    size = 16 << 20
    src = torch.from_numpy(rng.integers(0, 255, size, dtype=np.uint8))
    seg = _random_segments(rng, size, 3000, 4096)
    dst = torch.zeros_like(src)
    segcopy.copy_segments(seg.src_offsets.astype(np.uint64) + np.uint64(src.data_ptr()),
                          seg.dst_offsets.astype(np.uint64) + np.uint64(dst.data_ptr()), seg.nbytes, threads=3)
    assert torch.equal(dst, _expected(src, torch.zeros_like(src), seg))


@pytest.mark.parametrize(("sizes", "threads", "runs"), [
    ([5, 5], 2, [(0, 1), (1, 2)]),  # equal halves: one a thread (a seal chunk is two equal pages)
    ([1, 9], 2, [(0, 1), (1, 2)]),  # the large one alone beats both on one thread
    ([1, 1, 9], 3, [(0, 2), (2, 3)]),  # the large one alone; a third thread would wait on it anyway
    ([9, 1, 1], 3, [(0, 1), (1, 2), (2, 3)]),
    ([4] * 8, 4, [(0, 2), (2, 4), (4, 6), (6, 8)]),
    ([0, 0], 2, [(0, 1), (1, 2)]),
    ([7], 4, [(0, 1)]),
])
def test_the_split_gives_each_thread_a_share_of_the_bytes(sizes, threads, runs):
    """hal/transfer/threads.h, as both copy engines split their items (segments, objects)."""
    if segcopy.engine() != "native":
        pytest.skip(f"no native copy engine here: {segcopy.engine()}")
    w = np.array(sizes, dtype=np.uint64)
    lo, hi = np.zeros(64, np.int64), np.zeros(64, np.int64)
    k = segcopy._native.lib.hc_split_runs(w.ctypes.data, len(sizes), threads, lo.ctypes.data, hi.ctypes.data)
    assert list(zip(lo[:k].tolist(), hi[:k].tolist(), strict=True)) == runs
