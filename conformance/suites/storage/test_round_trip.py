"""Round trip: pages written from any host layout read back bit-identical into any other (MHA and
MLA), only the asked pages are written, and the stats count objects and payload bytes."""

from __future__ import annotations

import pytest
import torch

from conformance.suites import transfer_reference
from conformance.suites.storage.page_pools import MHA, MLA, PAGE_BYTES, page_bits, poisoned_pool, random_pool

GEOMS = {"mha": MHA, "mla": MLA}
PAIRS = [(a, s, d) for a in ("mha", "mla") for s in transfer_reference.layouts_for(a) for d in transfer_reference.layouts_for(a)]


@pytest.mark.parametrize("registered", [False, True], ids=["plain", "registered"])
@pytest.mark.parametrize("attention,src_layout,dst_layout", PAIRS)
def test_round_trip_bit_identical(store, register, unique, attention, src_layout, dst_layout, registered):
    geom = GEOMS[attention]
    src, dst = random_pool(geom, src_layout, seed=11), poisoned_pool(geom, dst_layout)
    if registered:  # zero copy where the backend supports it; must not change a byte
        register(src)
        register(dst)
    keys = [unique(f"{attention}-{src_layout}-{dst_layout}-{registered}-{i}") for i in range(3)]
    assert store.set(keys, src, [0, 2, 3]) == [True] * 3
    assert store.get(keys[::-1], dst, [1, 0, 3]) == [True] * 3
    assert torch.equal(page_bits(dst, 3), page_bits(src, 0))
    assert torch.equal(page_bits(dst, 0), page_bits(src, 2))
    assert torch.equal(page_bits(dst, 1), page_bits(src, 3))
    assert bool((page_bits(dst, 2).view(torch.uint8) == transfer_reference.POISON_BYTE).all()), "an unasked page was written"


def test_stats_count_objects_and_bytes(store, unique):
    src, dst = random_pool(MLA, "page_first", 12), poisoned_pool(MLA, "page_first")
    a, b, missing = unique("sa"), unique("sb"), unique("missing")
    store.set([a, b], src, [0, 1])
    store.get([a, missing, b], dst, [0, 1, 2])
    st = store.stats
    assert (st.objects_written, st.bytes_written) == (2, 2 * PAGE_BYTES["mla"])
    assert (st.objects_read, st.bytes_read, st.misses, st.corrupt, st.errors) == (2, 2 * PAGE_BYTES["mla"], 1, 0, 0)
