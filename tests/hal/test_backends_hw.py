"""cuda and xpu backends: stated reasons when absent, bit-exact plan execution and registration on hardware."""

import importlib.util
import mmap
import re

import numpy as np
import pytest
import torch

from hal.backend import Backend, get_backend
from hal.backends.cuda import CudaBackend
from hal.backends.support.cudalike import DIRECT_SEGMENT_LIMIT
from hal.backends.xpu import XpuBackend
from hal.memory.registration import split_range
from hal.transfer.layouts import KVGeometry, device_shape, host_shape
from hal.transfer.plan import CopyGroup, Segments, TransferPlan, plan_pool_transfer
from hal.transfer.rows import flat_bytes, row_dtype, row_indices, row_unit, row_views

BACKENDS = {"cuda": CudaBackend, "xpu": XpuBackend}


# -- absent hardware: the reasons users read ---------------------------------------------------

def test_cuda_probe_says_why_not():
    ok, why = CudaBackend.probe()
    if ok:
        pytest.skip("a CUDA device is present")
    assert why
    if importlib.util.find_spec("torch_xmlir") is not None:
        assert "Kunlun XPU" in why and "'xpu'" in why
    elif not torch.backends.cuda.is_built():
        assert why.startswith("torch was built without CUDA")
    else:
        assert why.startswith("no CUDA device")


def test_xpu_probe_says_why_not():
    ok, why = XpuBackend.probe()
    if ok:
        pytest.skip("a Kunlun XPU is present")
    if importlib.util.find_spec("torch_xmlir") is None:
        assert "torch_xmlir not importable" in why
        # An NVIDIA GPU must never be taken for an XPU.
        if torch.backends.cuda.is_built() and torch.cuda.is_available():
            assert why.startswith("CUDA is present but it is")
    else:
        assert "no XPU" in why or "not an XPU" in why


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_get_backend_raises_with_the_probe_reason(name):
    ok, why = BACKENDS[name].probe()
    if ok:
        pytest.skip(f"{name} is available here")
    with pytest.raises(RuntimeError, match=re.escape(why)):
        get_backend(name)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_contract_holds_without_a_device(name):
    backend = BACKENDS[name]()  # constructing must not touch a device
    assert isinstance(backend, Backend) and backend.name == name
    caps = backend.capabilities()
    assert caps.device_type == "cuda" and caps.host_registration and not caps.modeled_clock
    assert (caps.available, caps.reason) == BACKENDS[name].probe()
    assert not backend.is_device(torch.zeros(4))


def test_bad_plans_and_arguments_fail_before_any_work():
    backend = CudaBackend()
    symbolic = plan_pool_transfer("page_first", KVGeometry("mla", 2, 1, 16), 8, [0, 3], [1, 2], "d2h")
    with pytest.raises(ValueError, match=r"groups\[0\]\.src .*not a tensor"):
        backend.execute(symbolic)
    a, b = torch.zeros(64, dtype=torch.uint8), torch.zeros(64, dtype=torch.uint8)
    seg = Segments(np.array([0, 60]), np.array([0, 8]), np.array([8, 8]))
    with pytest.raises(ValueError, match=r"groups\[0\]\.src: a segment falls outside the 64-byte buffer"):
        backend.execute(TransferPlan("t", [CopyGroup(a, b, seg)]))
    with pytest.raises(ValueError, match="address"):
        backend.register_host(0, 4096)
    with pytest.raises(ValueError, match="nbytes"):
        backend.register_host(4096, -1)


# -- pure helpers of the gather/scatter path --------------------------------------------------

def _segments(src, dst, n):
    return Segments(*(np.asarray(x, dtype=np.int64) for x in (src, dst, n)))


def test_row_unit_is_the_gcd_of_offsets_and_lengths():
    assert row_unit(_segments([0, 96], [32, 160], [64, 32])) == 32
    assert row_unit(_segments([8], [0], [24])) == 8
    assert row_unit(_segments([], [], [])) == 0


def test_row_dtype_is_the_widest_that_fits_unit_and_alignment():
    assert row_dtype(24, 0, 8) is torch.int64
    assert row_dtype(24, 4, 0) is torch.int32
    assert row_dtype(6, 0, 0) is torch.int16
    assert row_dtype(3, 0, 0) is torch.uint8
    assert row_dtype(16, 0, 1) is torch.uint8


def test_row_indices_expand_segments_in_order():
    np.testing.assert_array_equal(row_indices([64, 0], [64, 32], 32), [2, 3, 0])
    rng = np.random.default_rng(1)
    unit = 16
    starts = rng.integers(0, 1000, 50) * unit
    lengths = rng.integers(1, 9, 50) * unit
    expected = [r for s, n in zip(starts, lengths, strict=True) for r in range(s // unit, (s + n) // unit)]
    np.testing.assert_array_equal(row_indices(starts, lengths, unit), expected)


def test_split_range_covers_exactly_in_bounded_pieces():
    assert split_range(4096, 100, None) == [(4096, 100)]
    pieces = split_range(4096, 10_000, 3000)
    assert pieces[0][0] == 4096 and all(n <= 3000 for _, n in pieces)
    assert all(a + n == b for (a, n), (b, _) in zip(pieces, pieces[1:], strict=False))
    assert sum(n for _, n in pieces) == 10_000


def test_row_views_reproduce_the_per_segment_copy_bit_for_bit():
    rng = np.random.default_rng(7)
    unit = 24  # forces int64 rows where aligned, narrower where a buffer starts off-alignment
    for src_shift, dst_shift in ((0, 0), (2, 0), (0, 6)):
        base = torch.randint(-(2**15), 2**15, (4096,), dtype=torch.int16)
        src = flat_bytes(base[src_shift:])  # storage offsets exercise the alignment rule
        dst_base = torch.zeros(4096, dtype=torch.int16)
        dst = flat_bytes(dst_base[dst_shift:])
        rows = (len(dst) - 1000) // unit
        n = 120
        s_off = rng.choice((len(src) - 200) // unit, n, replace=False) * unit
        d_off = rng.choice(rows // 2, n, replace=False) * 2 * unit  # disjoint destinations
        lengths = rng.integers(1, 3, n) * unit
        src_rows, dst_rows, si, di = row_views(src, dst, _segments(s_off, d_off, lengths))
        dst_rows.index_copy_(0, torch.from_numpy(di), src_rows.index_select(0, torch.from_numpy(si)))
        expected = torch.zeros_like(dst)
        for s, d, k in zip(s_off, d_off, lengths, strict=True):
            expected[d:d + k] = src[s:s + k]
        assert torch.equal(dst, expected)


# -- on hardware ----------------------------------------------------------------------------------

@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    ok, why = BACKENDS[request.param].probe()
    if not ok:
        pytest.skip(why)
    return get_backend(request.param)


GEOM = KVGeometry("mha", layers=3, heads=2, head_dim=8, dtype=torch.bfloat16, page_size=4)
SIZE, N = 512, 256


def _tokens(rng, contiguous, start):
    if contiguous:
        return np.arange(start, start + N)
    pages = rng.permutation(SIZE // GEOM.page_size)[: N // GEOM.page_size]
    return (pages[:, None] * GEOM.page_size + np.arange(GEOM.page_size)).ravel()


def _host_item(host, layout, part, layer, tokens):
    """Bytes of (part, layer, tokens) in a host pool, read through the pool's shape."""
    if layout == "layer_first":
        return host[part, layer, tokens]
    return host[part, tokens, layer]  # page_first


@pytest.mark.parametrize("layout, contiguous", [("page_first", False), ("layer_first", True)],
                         ids=["gather_scatter", "per_segment"])
def test_h2d_then_d2h_round_trip_is_bit_identical(backend, layout, contiguous):
    rng = np.random.default_rng(3)
    host = torch.empty(host_shape(layout, GEOM, SIZE), dtype=GEOM.dtype).pin_memory()
    host.view(torch.int16).copy_(torch.randint(-(2**15), 2**15, host.shape, dtype=torch.int16))
    back = torch.zeros_like(host).pin_memory()
    dev = [[backend.alloc_device(device_shape(GEOM, SIZE), GEOM.dtype).zero_() for _ in range(GEOM.layers)]
           for _ in range(GEOM.parts)]
    dev_bufs = [dict(enumerate(layers)) for layers in dev]
    h_tok, d_tok, back_tok = (_tokens(rng, contiguous, s) for s in (64, 128, 200))

    load = plan_pool_transfer(layout, GEOM, SIZE, h_tok, d_tok, "h2d", host_bufs=list(host), device_bufs=dev_bufs)
    backup = plan_pool_transfer(layout, GEOM, SIZE, back_tok, d_tok, "d2h", host_bufs=list(back),
                                device_bufs=dev_bufs)
    most = max(len(g.segments.nbytes) for g in load.groups + backup.groups)
    assert (most <= DIRECT_SEGMENT_LIMIT) == contiguous  # each case exercises the path it names

    stream = backend.new_stream()
    backend.execute(load, stream)
    backup_done = backend.execute(backup, stream)  # in order after the load on the same stream
    backup_done.wait()
    assert backup_done.query()

    bits = torch.int16
    for p in range(GEOM.parts):
        for layer in range(GEOM.layers):
            on_dev = dev[p][layer].cpu()[d_tok].view(bits)
            assert torch.equal(on_dev, _host_item(host, layout, p, layer, h_tok).view(bits))
            assert torch.equal(_host_item(back, layout, p, layer, back_tok).view(bits), on_dev)
    untouched = np.setdiff1d(np.arange(SIZE), back_tok)
    assert not _host_item(back, layout, 0, 0, untouched).view(bits).any()


def test_register_host_round_trip(backend):
    nbytes = 8 << 20
    region = mmap.mmap(-1, nbytes)
    host = torch.frombuffer(region, dtype=torch.uint8)
    host.copy_(torch.randint(0, 256, (nbytes,), dtype=torch.uint8))
    handle = backend.register_host(host.data_ptr(), nbytes)
    try:
        if backend.name == "cuda":
            assert host.is_pinned()  # torch treats cudaHostRegister'ed memory as pinned
        dev = backend.alloc_device((nbytes,), torch.uint8)
        half = nbytes // 2  # swap the halves: two segments, registered memory on the host side
        seg = Segments(np.array([0, half]), np.array([half, 0]), np.array([half, half]))
        backend.execute(TransferPlan("h2d", [CopyGroup(host, dev, seg)]), backend.new_stream()).wait()
        on_dev = dev.cpu()
        assert torch.equal(on_dev[half:], host[:half]) and torch.equal(on_dev[:half], host[half:])
    finally:
        backend.unregister_host(handle)
    if backend.name == "cuda":
        assert not host.is_pinned()


@pytest.mark.parametrize("mode", ["descriptor", "gather"])
def test_scattered_round_trip_is_bit_identical_in_each_copy_mode(backend, mode):
    """The many-segment case in both copy modes: descriptor copies each segment, gather gathers."""
    moded = backend.with_copy_mode(mode)
    assert moded.copy_mode == mode
    rng = np.random.default_rng(11)
    host = torch.empty(host_shape("page_first", GEOM, SIZE), dtype=GEOM.dtype).pin_memory()
    host.view(torch.int16).copy_(torch.randint(-(2**15), 2**15, host.shape, dtype=torch.int16))
    back = torch.zeros_like(host).pin_memory()
    dev = [[moded.alloc_device(device_shape(GEOM, SIZE), GEOM.dtype).zero_() for _ in range(GEOM.layers)]
           for _ in range(GEOM.parts)]
    dev_bufs = [dict(enumerate(layers)) for layers in dev]
    h_tok, d_tok = _tokens(rng, False, 0), _tokens(rng, False, 0)
    load = plan_pool_transfer("page_first", GEOM, SIZE, h_tok, d_tok, "h2d", host_bufs=list(host), device_bufs=dev_bufs)
    backup = plan_pool_transfer("page_first", GEOM, SIZE, h_tok, d_tok, "d2h", host_bufs=list(back),
                                device_bufs=dev_bufs)
    assert max(len(g.segments.nbytes) for g in load.groups) > DIRECT_SEGMENT_LIMIT
    stream = moded.new_stream()
    moded.execute(load, stream)
    moded.execute(backup, stream).wait()
    for p in range(GEOM.parts):
        for layer in range(GEOM.layers):
            assert torch.equal(_host_item(back, "page_first", p, layer, h_tok).view(torch.int16),
                               _host_item(host, "page_first", p, layer, h_tok).view(torch.int16))
