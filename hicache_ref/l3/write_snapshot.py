"""A private copy of host pages for the L3 write thread, taken on the scheduler thread.

The write thread must not read the live host pool: the tree hands L2 slots out again as it
evicts, and pinning them (upstream protects a host copy until its storage write is done)
would make L1 and L2 eviction depend on how fast the store writes. So the pages are copied
out first, in canonical page order (hicache_ref.storage.pages), into a small pool in the
page_first_direct layout, where each page is one run per part: the store then writes from
views of it with no further copy. The cost is one host memcpy of the written pages on the
scheduler thread, all pages in one submission to the copy engine; given the keys and the
store's digest, the objects' trailers are computed in that same pass (the store's set then
only writes). In exchange the tree never waits for L3 and never keeps a page for it.
"""

from __future__ import annotations

import numpy as np
import torch

from hal.transfer import digestcopy, layouts, segcopy
from hicache_ref.storage import integrity
from hicache_ref.storage import pages as page_order

STAGING_LAYOUT = "page_first_direct"


class StagedPages:
    """Host-pool-shaped copy of some pages of `host_pool` (page i = the i-th page given). With
    `keys` (one per page) and `digest`, the trailer of each page's object is sealed while copying."""

    def __init__(self, host_pool, host_pages, keys=None, digest: str | None = None):
        if keys is not None and len(keys) != len(host_pages):
            raise ValueError(f"keys: {len(keys)} keys for {len(host_pages)} pages")
        geom = host_pool.geom
        self.geom, self.layout = geom, STAGING_LAYOUT
        self.num_tokens = len(host_pages) * geom.page_size
        whole = torch.empty(layouts.host_shape(STAGING_LAYOUT, geom, self.num_tokens), dtype=geom.dtype)
        self.buffers = [whole[p] for p in range(geom.parts)] if geom.attention == "mha" else [whole]
        self._trailers: dict[int, tuple[str, str, bytes]] = {}
        if len(host_pages) == 0:
            return
        source, target = page_order.run_addresses(host_pool), page_order.run_addresses(self)
        if source is None or target is None or segcopy.engine() != "native":  # gathered anyway: page by page
            for i, page in enumerate(host_pages):
                page_order.write_page(self, i, torch.cat(page_order.page_segments(host_pool, int(page))))
            return
        # page 0's pairing of source and target runs serves every page, shifted by each side's page step
        src0, dst0, lens = digestcopy.paired(source[0], source[1], target[0], target[1])
        count = len(host_pages)
        src = src0[None, :] + np.asarray(host_pages, dtype=np.uint64)[:, None] * np.uint64(source[2])
        dst = dst0[None, :] + np.arange(count, dtype=np.uint64)[:, None] * np.uint64(target[2])
        sealed = None
        if keys is not None and digest is not None and digestcopy.engine() == "native":
            sealed = integrity.copy_trailers(digest, [(k, src[i], dst[i], lens) for i, k in enumerate(keys)])
        if sealed is None:
            segcopy.copy_segments(src.reshape(-1), dst.reshape(-1), np.tile(lens, count))
            return
        self._trailers = {i: (k, digest, t) for i, (k, t) in enumerate(zip(keys, sealed, strict=True))}

    def trailer(self, key: str, page: int, digest: str) -> bytes | None:
        """The trailer sealed while copying page `page` for `key` with `digest`, else None."""
        found = self._trailers.get(page)
        return found[2] if found is not None and found[:2] == (key, digest) else None
