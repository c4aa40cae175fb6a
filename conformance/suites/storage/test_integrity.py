"""Integrity: objects damaged in the store (a flipped byte, truncated, extended, emptied, stored
under another key) are detected on read, counted as corrupt and never returned as KV.

The damaged objects are written through the backend's own write hook (`_write`), so they sit in the
store exactly where and how the backend keeps objects; only their bytes are wrong."""

from __future__ import annotations

import pytest
import torch

from conformance.suites import transfer_reference
from conformance.suites.storage.page_pools import MHA, page_bits, poisoned_pool, random_pool
from hicache_ref.storage import integrity, pages


def _object(key: str, pool, page: int) -> bytearray:
    payload = [s.clone() for s in pages.page_segments(pool, page)]
    return bytearray(b"".join(s.numpy().tobytes() for s in payload) + integrity.trailer("xxh3", key, payload))


DAMAGE = {
    "flip_payload": lambda b: b.__setitem__(3, b[3] ^ 0x04) or b,
    "flip_trailer": lambda b: b.__setitem__(len(b) - 5, b[len(b) - 5] ^ 0x80) or b,
    "truncate": lambda b: b[:-1],
    "truncate_payload": lambda b: b[:1] + b[2:],
    "extend": lambda b: b + b"\0",
    "empty": lambda b: bytearray(),
}


def _store_raw(store, key: str, blob: bytearray) -> None:
    data = torch.frombuffer(blob, dtype=torch.uint8) if blob else torch.empty(0, dtype=torch.uint8)
    stored = store._write([(key, [data.numpy().reshape(1, -1)])])
    if not blob and stored != [True]:
        pytest.skip(f"{store.name} does not store a 0-byte object, so none can be found empty")
    assert stored == [True]


@pytest.mark.parametrize("how", sorted(DAMAGE))
@pytest.mark.parametrize("dst_layout", ["layer_first", "page_first", "page_first_direct"])
def test_damaged_object_is_a_counted_miss(store, unique, how, dst_layout):
    src, dst = random_pool(MHA, "page_first", 31), poisoned_pool(MHA, dst_layout)
    good, bad = unique(f"good-{how}-{dst_layout}"), unique(f"bad-{how}-{dst_layout}")
    assert store.set([good], src, [0]) == [True]
    _store_raw(store, bad, DAMAGE[how](_object(bad, src, 1)))
    assert store.get([good, bad], dst, [0, 1]) == [True, False]
    assert store.stats.corrupt == 1 and store.stats.objects_read == 1
    assert torch.equal(page_bits(dst, 0), page_bits(src, 0))
    if dst_layout == "page_first":  # read through staging: a failed page's slot is untouched
        assert bool((page_bits(dst, 1).view(torch.uint8) == transfer_reference.POISON_BYTE).all())
    # the damaged object was discarded, so a set stores the page again and it reads back
    assert store.exists([bad]) == 0
    assert store.set([bad], src, [1]) == [True] and store.get([bad], dst, [1]) == [True]
    assert torch.equal(page_bits(dst, 1), page_bits(src, 1))


def test_object_under_another_key_is_corrupt(store, unique):
    src, dst = random_pool(MHA, "page_head", 32), poisoned_pool(MHA, "page_head")
    a, b = unique("right"), unique("wrong")
    _store_raw(store, b, _object(a, src, 2))  # a's intact object, stored under b
    assert store.get([b], dst, [2]) == [False]
    assert store.stats.corrupt == 1
