"""page_head: pages first, then heads, then the page's tokens, then layers (upstream's page_head; MHA only).

Shape (2, pages, heads, page_size, layers, head_dim). Each item splits into one piece per
head, so a copy's pieces are head-sized and a page of one layer is page_size * heads runs.
Moved by transfer_kv_all_layer_lf_ph / transfer_kv_per_layer_ph_lf.
"""

from __future__ import annotations

import numpy as np

from hal.transfer.layouts.base import HostLayout


class PageHead(HostLayout):
    name = "page_head"
    upstream_direct = False
    page_axes = (2, 1, 0)
    attentions = ("mha",)

    def shape(self, geom, size):
        return (2, size // geom.page_size, geom.heads, geom.page_size, geom.layers, geom.head_dim)

    def pieces(self, geom):
        return geom.heads

    def piece_offsets(self, geom, size, tokens):
        t, ps, L = tokens.astype(np.int64)[:, None], geom.page_size, geom.layers
        hb = geom.item_size // geom.heads
        h = np.arange(geom.heads, dtype=np.int64)[None, :]
        return (t // ps) * (ps * geom.layout_dim) + h * (ps * L * hb) + (t % ps) * (L * hb)

    def layer_shift(self, geom, size, layer):
        return layer * (geom.item_size // geom.heads)

    def slots(self, geom, part):
        return part.shape[0] * geom.page_size

    def ops(self, geom):
        return "transfer_kv_all_layer_lf_ph", "transfer_kv_per_layer_ph_lf"

    def backup(self, geom, host_bufs, device_bufs, host_indices, device_indices, kv=None):
        from hal.transfer import kvcacheio

        kv = kvcacheio if kv is None else kv

        (hk, hv), (dk, dv) = host_bufs, device_bufs
        return kv.transfer_kv_all_layer_lf_ph(list(dk), hk, list(dv), hv, device_indices, host_indices,
                                              geom.item_size, geom.layout_dim, geom.layers, geom.page_size,
                                              geom.heads)

    def load_layer(self, geom, host_bufs, device_bufs, host_indices, device_indices, layer, kv=None):
        from hal.transfer import kvcacheio

        kv = kvcacheio if kv is None else kv

        (hk, hv), (dk, dv) = host_bufs, device_bufs
        return kv.transfer_kv_per_layer_ph_lf(hk, dk[layer], hv, dv[layer], host_indices, device_indices, layer,
                                              geom.item_size, geom.layout_dim, geom.page_size, geom.heads)


LAYOUT = PageHead
