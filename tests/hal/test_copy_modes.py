"""Copy modes of the CUDA-like backends: selection and validation, the descriptor/gather split, and the
per-segment copy itself (run here on CPU tensors; on a device it is one cudaMemcpyAsync each)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hal.backend import get_backend
from hal.backends.cuda import CudaBackend
from hal.backends.support.copy_modes import (
    COPY_MODE_ENV,
    COPY_MODES,
    DEFAULT_COPY_MODE,
    DIRECT_SEGMENT_LIMIT,
    copies_each_segment,
    resolve_copy_mode,
)
from hal.backends.support.cudalike import CudaLikeBackend, _Job
from hal.backends.xpu import XpuBackend
from hal.transfer.plan import Segments
from hal.transfer.rows import flat_bytes
from hal.transfer.seed import seed_plan


def test_modes_and_default():
    assert COPY_MODES == ("descriptor", "gather") and DEFAULT_COPY_MODE == "gather"
    assert resolve_copy_mode(environ={}) == "gather"
    assert resolve_copy_mode("descriptor", environ={COPY_MODE_ENV: "gather"}) == "descriptor"  # argument wins
    assert resolve_copy_mode(environ={COPY_MODE_ENV: " descriptor "}) == "descriptor"


@pytest.mark.parametrize("bad", ["Descriptor", "none", "gather,descriptor", 1, True])
def test_bad_copy_mode_argument_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=r"^copy_mode: .* is not one of descriptor, gather"):
        resolve_copy_mode(bad, environ={})


def test_bad_environment_value_is_refused_naming_the_variable():
    with pytest.raises(ValueError, match=rf"^{COPY_MODE_ENV}: 'fast' is not one of descriptor, gather"):
        resolve_copy_mode(environ={COPY_MODE_ENV: "fast"})


@pytest.mark.parametrize("cls", [CudaBackend, XpuBackend])
def test_each_instance_has_its_own_mode(cls, monkeypatch):
    monkeypatch.delenv(COPY_MODE_ENV, raising=False)
    assert cls.copy_modes == COPY_MODES
    a, b = cls(), cls(copy_mode="descriptor")
    assert (a.copy_mode, b.copy_mode) == ("gather", "descriptor")
    sibling = a.with_copy_mode("descriptor")
    assert type(sibling) is cls and sibling.copy_mode == "descriptor" and a.copy_mode == "gather"
    assert sibling.profile is a.profile
    monkeypatch.setenv(COPY_MODE_ENV, "descriptor")
    assert cls().copy_mode == "descriptor" and cls(copy_mode="gather").copy_mode == "gather"
    with pytest.raises(ValueError, match="copy_mode: 'dma'"):
        cls(copy_mode="dma")


def test_backends_without_a_choice_say_so():
    with get_backend("emu", "emu") as emu:
        assert emu.copy_modes == () and emu.copy_mode is None


def test_descriptor_mode_copies_every_segment_gather_mode_only_few():
    for n in (1, DIRECT_SEGMENT_LIMIT, DIRECT_SEGMENT_LIMIT + 1, 39_936):
        assert copies_each_segment("descriptor", n)
        assert copies_each_segment("gather", n) == (n <= DIRECT_SEGMENT_LIMIT)


def test_the_seed_transfer_is_39936_descriptors_in_descriptor_mode_and_gathered_in_gather_mode():
    plan = seed_plan("page_first_direct")
    assert plan.num_segments == 39_936
    per_group = [len(g.segments.nbytes) for g in plan.groups]
    assert all(copies_each_segment("descriptor", n) for n in per_group)
    assert not any(copies_each_segment("gather", n) for n in per_group)
    # layer_first's 78 runs are copied one by one in both modes
    assert all(copies_each_segment("gather", len(g.segments.nbytes)) for g in seed_plan("layer_first").groups)


def test_per_segment_copy_moves_exactly_the_segments():
    rng = np.random.default_rng(5)
    src = torch.from_numpy(rng.integers(0, 256, 1 << 16, dtype=np.uint8))
    dst = torch.zeros(1 << 16, dtype=torch.uint8)
    n = 300  # far above the gather limit: descriptor mode copies them all one by one
    s_off = rng.choice((1 << 16) // 64, n, replace=False) * 64
    d_off = np.arange(n) * 128
    lengths = rng.integers(1, 3, n) * 32
    seg = Segments(s_off.astype(np.int64), d_off.astype(np.int64), lengths.astype(np.int64))
    CudaLikeBackend._copy_segments(_Job(flat_bytes(src), flat_bytes(dst), seg, False, False))
    expected = torch.zeros_like(dst)
    for s, d, k in zip(s_off, d_off, lengths, strict=True):
        expected[d:d + k] = src[s:s + k]
    assert torch.equal(dst, expected)
