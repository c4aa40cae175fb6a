"""Host buffers are registered once each, up to the backend's one-registration limit, and no plan's copy spans two registered ranges."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hal.backends.emu import EmuBackend
from hal.memory.host import allocate_host
from hal.transfer import kvcacheio
from hal.transfer.rows import flat_bytes

MB = 1 << 20


class Recording(EmuBackend):
    """emu that records every registered range and every host-side run of every plan it runs."""

    name = "emu-recording"
    max_registration_bytes = 8 * MB

    def __init__(self):
        super().__init__(None)
        self.ranges: list[tuple[int, int]] = []
        self.host_runs: list[tuple[int, int]] = []

    def _register_range(self, address, nbytes):
        self.ranges.append((address, nbytes))
        return super()._register_range(address, nbytes)

    def _execute(self, plan, stream):
        for g in plan.groups:
            for t, offsets in ((g.src, g.segments.src_offsets), (g.dst, g.segments.dst_offsets)):
                if not self.is_device(t):
                    base = flat_bytes(t).data_ptr()
                    self.host_runs += [(base + o, n) for o, n in zip(offsets.tolist(), g.segments.nbytes.tolist(),
                                                                      strict=True)]
        return super()._execute(plan, stream)


@pytest.fixture
def backend():
    b = Recording()
    yield b
    b.close()


def test_a_host_buffer_is_one_registration(backend):
    buf = allocate_host(6 * MB, huge_pages=False, backend=backend)
    try:
        assert backend.ranges == [(buf.tensor.data_ptr(), buf.report()["registered_bytes"])]
        assert buf.report()["register_chunks"] == 1
    finally:
        buf.close()


def test_a_buffer_over_the_one_registration_limit_is_refused_naming_nbytes(backend):
    with pytest.raises(ValueError, match=r"^nbytes: .* over backend 'emu-recording''s one-registration limit"):
        allocate_host(9 * MB, huge_pages=False, backend=backend)
    assert backend.ranges == []  # refused before anything was mapped or registered


def _within_one(ranges, address, nbytes) -> bool:
    return sum(a < address + nbytes and address < a + n for a, n in ranges) == 1 and any(
        a <= address and address + nbytes <= a + n for a, n in ranges)


@pytest.mark.parametrize("page", [1, 16])
def test_no_plan_over_host_buffers_spans_two_registered_ranges(backend, page):
    # Two registered pools side by side in memory order, as a TP-shared host pool and a private
    # one can be: every run of every backup and load lies inside one registration.
    layers, tokens, item = 3, 4096, 64
    bufs = [allocate_host(layers * tokens * item, huge_pages=False, backend=backend) for _ in range(2)]
    try:
        rng = np.random.default_rng(page)
        device = [backend.alloc_device((tokens, item), torch.uint8) for _ in range(layers)]
        with kvcacheio.use(backend):
            for buf in bufs:
                host = buf.tensor[: layers * tokens * item].view(layers, tokens, item)
                pages = rng.permutation(tokens // page)
                idx = torch.from_numpy((pages[:, None] * page + np.arange(page)).reshape(-1))
                kvcacheio.transfer_kv_all_layer_mla(device, list(host), idx, idx.flip(0), item, layers).wait(60)
                for layer in range(layers):
                    kvcacheio.transfer_kv_per_layer_mla(host[layer], device[layer], idx, idx, item).wait(60)
        assert backend.host_runs
        crossing = [r for r in backend.host_runs if not _within_one(backend.ranges, *r)]
        assert not crossing, f"{len(crossing)} host runs outside exactly one registration, e.g. {crossing[:3]}"
        assert len(backend.ranges) == 2
    finally:
        for buf in bufs:
            buf.close()
