"""page_first: token-major, every layer of a token together (upstream's page_first).

MHA (2, size, layers, heads, head_dim); MLA (size, layers, 1, kv_dim). A token's item of a
layer sits at token * layout_dim + layer * item_size, so consecutive tokens of one layer are
never adjacent: one run per token and layer. Moved by transfer_kv_all_layer[_mla]_lf_pf /
transfer_kv_per_layer[_mla]_pf_lf. Under the direct io backend upstream switches the pool to
page_first_direct, and so does `under`.
"""

from __future__ import annotations

import numpy as np

from hal.transfer.layouts.base import HostLayout


class PageFirst(HostLayout):
    name = "page_first"
    page_axes = (1, 0, 2)

    def shape(self, geom, size):
        if geom.attention == "mla":
            return (size, geom.layers, 1, geom.head_dim)
        return (2, size, geom.layers, geom.heads, geom.head_dim)

    def piece_offsets(self, geom, size, tokens):
        return tokens.astype(np.int64)[:, None] * geom.layout_dim

    def layer_shift(self, geom, size, layer):
        return layer * geom.item_size

    def slots(self, geom, part):
        return part.shape[0]

    def ops(self, geom):
        if geom.attention == "mla":
            return "transfer_kv_all_layer_mla_lf_pf", "transfer_kv_per_layer_mla_pf_lf"
        return "transfer_kv_all_layer_lf_pf", "transfer_kv_per_layer_pf_lf"

    def under(self, io_backend):
        from hal.transfer.layout_registry import get_layout

        return get_layout("page_first_direct") if io_backend == "direct" else self

    def backup(self, geom, host_bufs, device_bufs, host_indices, device_indices, kv=None):
        from hal.transfer import kvcacheio

        kv = kvcacheio if kv is None else kv

        L, item, ldim = geom.layers, geom.item_size, geom.layout_dim
        if geom.attention == "mla":
            (host,), (dev,) = host_bufs, device_bufs
            return kv.transfer_kv_all_layer_mla_lf_pf(list(dev), host, device_indices, host_indices, item, ldim, L)
        (hk, hv), (dk, dv) = host_bufs, device_bufs
        return kv.transfer_kv_all_layer_lf_pf(list(dk), hk, list(dv), hv, device_indices, host_indices, item, ldim, L)

    def load_layer(self, geom, host_bufs, device_bufs, host_indices, device_indices, layer, kv=None):
        from hal.transfer import kvcacheio

        kv = kvcacheio if kv is None else kv

        item, ldim = geom.item_size, geom.layout_dim
        if geom.attention == "mla":
            (host,), (dev,) = host_bufs, device_bufs
            return kv.transfer_kv_per_layer_mla_pf_lf(host, dev[layer], host_indices, device_indices, layer, item,
                                                      ldim)
        (hk, hv), (dk, dv) = host_bufs, device_bufs
        return kv.transfer_kv_per_layer_pf_lf(hk, dk[layer], hv, dv[layer], host_indices, device_indices, layer,
                                              item, ldim)


LAYOUT = PageFirst
