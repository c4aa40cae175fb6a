"""layer_first: one contiguous block per layer, tokens in slot order inside it (upstream's default).

MHA (2, layers, size, heads, head_dim); MLA (layers, size, 1, kv_dim). A token's item of a
layer sits at token * item_size in that layer's block, so a page is one run per layer and
part. Moved by transfer_kv_all_layer[_mla] / transfer_kv_per_layer[_mla] (the device and host
sides are both per-layer buffers). With the direct io backend upstream sorts the pairs by
host index first, so runs scattered in request order can merge.
"""

from __future__ import annotations

import numpy as np

from hal.transfer.layouts.base import HostLayout


class LayerFirst(HostLayout):
    name = "layer_first"
    page_runs = True
    direct_sorted = True

    def shape(self, geom, size):
        if geom.attention == "mla":
            return (geom.layers, size, 1, geom.head_dim)
        return (2, geom.layers, size, geom.heads, geom.head_dim)

    def piece_offsets(self, geom, size, tokens):
        return tokens.astype(np.int64)[:, None] * geom.item_size

    def layer_shift(self, geom, size, layer):
        return layer * size * geom.item_size

    def slots(self, geom, part):
        return part.shape[1]

    def ops(self, geom):
        if geom.attention == "mla":
            return "transfer_kv_all_layer_mla", "transfer_kv_per_layer_mla"
        return "transfer_kv_all_layer", "transfer_kv_per_layer"

    def backup(self, geom, host_bufs, device_bufs, host_indices, device_indices, kv=None):
        from hal.transfer import kvcacheio

        kv = kvcacheio if kv is None else kv

        L, item = geom.layers, geom.item_size
        if geom.attention == "mla":
            (host,), (dev,) = host_bufs, device_bufs
            return kv.transfer_kv_all_layer_mla(list(dev), [host[i] for i in range(L)], device_indices,
                                                host_indices, item, L)
        (hk, hv), (dk, dv) = host_bufs, device_bufs
        return kv.transfer_kv_all_layer(list(dk), [hk[i] for i in range(L)], list(dv), [hv[i] for i in range(L)],
                                        device_indices, host_indices, item, L)

    def load_layer(self, geom, host_bufs, device_bufs, host_indices, device_indices, layer, kv=None):
        from hal.transfer import kvcacheio

        kv = kvcacheio if kv is None else kv

        if geom.attention == "mla":
            (host,), (dev,) = host_bufs, device_bufs
            return kv.transfer_kv_per_layer_mla(host[layer], dev[layer], host_indices, device_indices,
                                                geom.item_size)
        (hk, hv), (dk, dv) = host_bufs, device_bufs
        return kv.transfer_kv_per_layer(hk[layer], dk[layer], hv[layer], dv[layer], host_indices, device_indices,
                                        geom.item_size)


LAYOUT = LayerFirst
