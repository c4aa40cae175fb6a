"""exists(keys) is the length of the leading run of keys present (upstream's batch_exists)."""

from __future__ import annotations

from conformance.suites.storage.page_pools import MLA, random_pool


def test_leading_run(store, unique):
    pool = random_pool(MLA, "layer_first", 21)
    a, b, c, d = (unique(x) for x in "abcd")
    assert store.set([a, b, d], pool, [0, 1, 2]) == [True] * 3
    assert store.exists([a, b, c, d]) == 2  # d is present but after the hole at c
    assert store.exists([a, b, d]) == 3
    assert store.exists([c, a, b]) == 0
    assert store.exists([d]) == 1
    assert store.exists([]) == 0


def test_a_set_is_visible_to_exists_at_once(store, unique):
    pool = random_pool(MLA, "page_first", 22)
    keys = [unique(f"run{i}") for i in range(4)]
    for i, key in enumerate(keys):
        assert store.exists(keys) == i
        assert store.set([key], pool, [i]) == [True]
    assert store.exists(keys) == 4
