"""A private copy of host pages for the L3 write thread, taken on the scheduler thread.

The write thread must not read the live host pool: the tree hands L2 slots out again as it
evicts, and pinning them (upstream protects a host copy until its storage write is done)
would make L1 and L2 eviction depend on how fast the store writes. So the pages are copied
out first, in canonical page order (hicache_ref.storage.pages), into a small pool in the
page_first_direct layout, where each page is one run per part: the store then writes from
views of it with no further copy. The cost is one host memcpy of the written pages on the
scheduler thread; in exchange the tree never waits for L3 and never keeps a page for it.
"""

from __future__ import annotations

import torch

from hal.transfer import layouts
from hicache_ref.storage import pages as page_order

STAGING_LAYOUT = "page_first_direct"


class StagedPages:
    """Host-pool-shaped copy of some pages of `host_pool` (page i = the i-th page given)."""

    def __init__(self, host_pool, host_pages):
        geom = host_pool.geom
        self.geom, self.layout = geom, STAGING_LAYOUT
        self.num_tokens = len(host_pages) * geom.page_size
        whole = torch.empty(layouts.host_shape(STAGING_LAYOUT, geom, self.num_tokens), dtype=geom.dtype)
        self.buffers = [whole[p] for p in range(geom.parts)] if geom.attention == "mha" else [whole]
        for i, page in enumerate(host_pages):
            page_order.write_page(self, i, torch.cat(page_order.page_segments(host_pool, int(page))))
