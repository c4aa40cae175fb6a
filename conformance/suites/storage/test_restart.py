"""Restart: the store outlives its clients and its own restart.

- Every backend: a client closed and a new one opened on the same spec works at once; where the
  backend is `persistent` (file: a new client on the same directory) it reads the old objects
  bit-identical, elsewhere it reads them intact or not at all.
- `mooncake:auto`: the master is killed and restarted under live clients; a client fails softly
  (False, counted errors, no exception) while it is down, and every live client (the suite's
  session client included, which later tests use) works again after it reconnects.
"""

from __future__ import annotations

import time

import pytest
import torch

from conformance.suites.storage.page_pools import MHA, MLA, page_bits, poisoned_pool, random_pool

RECONNECT_SECONDS = 30


def test_new_client_after_close(clients, unique):
    first = clients.open()
    src = random_pool(MHA, "page_first", 70)
    keys = [unique("before0"), unique("before1")]
    assert first.set(keys, src, [0, 3]) == [True, True]
    persistent = first.persistent
    first.close()
    second = clients.open()
    dst = poisoned_pool(MHA, "page_first_direct")
    got = second.get(keys, dst, [1, 2])
    if persistent:
        assert got == [True, True]
    for ok, (d, s) in zip(got, ((1, 0), (2, 3)), strict=True):
        if ok:
            assert torch.equal(page_bits(dst, d), page_bits(src, s))
    assert second.stats.corrupt == 0
    assert second.set([unique("after")], src, [1]) == [True]


def test_master_restart_under_a_live_client(clients, store, unique):
    if clients.cluster is None:
        pytest.skip("only for mooncake:auto: the suite restarts the master of the cluster it started")
    fresh = clients.open()
    src, dst = random_pool(MLA, "page_first", 71), poisoned_pool(MLA, "page_first")
    assert fresh.set([unique("pre")], src, [0]) == [True]
    clients.cluster.restart_master()
    got = fresh.get([unique("pre")], dst, [0])  # the master forgot it: a miss or an error, never stale KV
    if got == [True]:
        assert torch.equal(page_bits(dst, 0), page_bits(src, 0))
    deadline = time.monotonic() + RECONNECT_SECONDS
    for i, (name, client) in enumerate((("the test's client", fresh), ("the session's client", store))):
        key = unique(f"post{i}")
        while client.set([key], src, [1]) != [True]:
            assert time.monotonic() < deadline, f"{name}: no reconnect within {RECONNECT_SECONDS} s of the restart"
            time.sleep(0.2)
        assert client.get([key], dst, [2]) == [True]
        assert torch.equal(page_bits(dst, 2), page_bits(src, 1))
        assert client.stats.corrupt == 0
