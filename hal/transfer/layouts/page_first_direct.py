"""page_first_direct: pages first, then layers, then the page's tokens (upstream's page_first_direct).

MHA (2, pages, layers, page_size, heads, head_dim); MLA (pages, layers, page_size, 1, kv_dim).
A page of one layer is page_size consecutive items, so a page is one run per layer and part.
Moved by the page-granular direct ops, transfer_kv_all_layer_direct_lf_pf /
transfer_kv_per_layer_direct_pf_lf, which take each page's first slot.
"""

from __future__ import annotations

import numpy as np

from hal.transfer.layouts.base import HostLayout


class PageFirstDirect(HostLayout):
    name = "page_first_direct"
    native_io_backend = "direct"  # one copy per (page, layer) run: what the layout is for
    page_runs = True

    def shape(self, geom, size):
        pages, ps = size // geom.page_size, geom.page_size
        if geom.attention == "mla":
            return (pages, geom.layers, ps, 1, geom.head_dim)
        return (2, pages, geom.layers, ps, geom.heads, geom.head_dim)

    def piece_offsets(self, geom, size, tokens):
        t, ps = tokens.astype(np.int64)[:, None], geom.page_size
        return (t // ps) * (ps * geom.layout_dim) + (t % ps) * geom.item_size

    def layer_shift(self, geom, size, layer):
        return layer * geom.page_size * geom.item_size

    def slots(self, geom, part):
        return part.shape[0] * geom.page_size

    def ops(self, geom):
        return "transfer_kv_all_layer_direct_lf_pf", "transfer_kv_per_layer_direct_pf_lf"

    def backup(self, geom, host_bufs, device_bufs, host_indices, device_indices, kv=None):
        from hal.transfer import kvcacheio

        kv = kvcacheio if kv is None else kv

        device = [t for part in device_bufs for t in part]  # K layers then V layers (MHA)
        return kv.transfer_kv_all_layer_direct_lf_pf(device, list(host_bufs), device_indices, host_indices,
                                                     geom.page_size)

    def load_layer(self, geom, host_bufs, device_bufs, host_indices, device_indices, layer, kv=None):
        from hal.transfer import kvcacheio

        kv = kvcacheio if kv is None else kv

        return kv.transfer_kv_per_layer_direct_pf_lf(list(host_bufs), [part[layer] for part in device_bufs],
                                                     host_indices, device_indices, layer, geom.page_size)


LAYOUT = PageFirstDirect
