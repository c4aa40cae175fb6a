"""kvcacheio argument checks that name the exact argument: V lists, mixed list kinds, direct host parts."""

import pytest
import torch

from hal.backend import get_backend
from hal.transfer import kvcacheio as kv

L, SIZE, D = 2, 8, 8


@pytest.fixture(scope="module")
def emu():
    return get_backend("emu", "emu")


def _dev(emu, n=L, size=SIZE):
    return [emu.alloc_device((size, 1, D), torch.float32).zero_() for _ in range(n)]


def test_a_bad_v_layer_is_named_as_a_v_layer(emu):
    k, v = _dev(emu), _dev(emu)
    v[1] = emu.alloc_device((SIZE, 2, D), torch.float32)  # rows twice as wide
    host = torch.zeros(SIZE, L, 1, D)
    idx = torch.arange(2)
    with pytest.raises(ValueError, match=r"src_v_layers\[1\]"):
        kv.transfer_kv_all_layer_lf_pf(k, host, v, host.clone(), idx, idx, D * 4, L * D * 4, L)


def test_tuple_and_list_layer_arguments_mix(emu):
    k, v = tuple(_dev(emu)), _dev(emu)
    host_k, host_v = torch.zeros(SIZE, L, 1, D), torch.zeros(SIZE, L, 1, D)
    for layer in k + tuple(v):
        layer.fill_(3)
    idx = torch.arange(4)
    kv.transfer_kv_all_layer_lf_pf(k, host_k, v, host_v, idx, idx, D * 4, L * D * 4, L).wait()
    assert (host_k[:4] == 3).all() and (host_v[:4] == 3).all()


def test_direct_host_parts_must_share_a_shape(emu):
    ps = 4
    dev = _dev(emu) + _dev(emu)
    host_k = torch.zeros(SIZE // ps, L, ps, 1, D)
    host_v = torch.zeros(SIZE // ps // 2, 2 * L, ps, 1, D)  # same bytes, other layer stride
    idx = torch.arange(ps)
    with pytest.raises(ValueError, match=r"dst_ptrs\[1\]: shape"):
        kv.transfer_kv_all_layer_direct_lf_pf(dev, [host_k, host_v], idx, idx, ps)
    assert not host_k.any() and not host_v.any()


def test_direct_host_without_pages_is_a_value_error(emu):
    with pytest.raises(ValueError, match=r"dst_ptrs\[0\]"):
        kv.transfer_kv_all_layer_direct_lf_pf(_dev(emu), [torch.zeros(0, L, 4, 1, D)],
                                              torch.arange(4), torch.arange(4), 4)


def test_sizes_follow_one_rule_numpy_ints_yes_bools_no():
    import numpy as np

    from hal.common.arg_checks import positive_int
    from hal.transfer.layouts import KVGeometry

    assert positive_int("page_size", np.int64(64)) == 64
    g = KVGeometry("mla", np.int32(2), 1, 8)
    assert type(g.layers) is int
    for bad in (True, 0, -1, 2.0, "4"):
        with pytest.raises(ValueError, match="page_size"):
            positive_int("page_size", bad)


def test_pool_transfer_without_buffers_names_the_argument(emu):
    from hal.transfer import pool_ops as pool_transfer
    from hal.transfer.layouts import KVGeometry

    g = KVGeometry("mla", L, 1, D)
    with pytest.raises(ValueError, match="host_bufs"):
        pool_transfer.backup("layer_first", g, None, [_dev(emu)], [0], [0])
