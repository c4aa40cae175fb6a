"""Fixtures of the storage suite: the spec under test (from $HICACHE_STORAGE_SPEC, which
`hicache conform --storage SPEC` sets), clients of it, and for `mooncake:auto` the loopback cluster.

Without a spec every test here is skipped with that reason (the harness's own `pytest` run collects
this package too; `hicache conform --storage` is what runs it for real). A spec whose backend cannot
open here skips every test with the backend's own one-line reason, so the verdict is NOT RUN.
"""

from __future__ import annotations

import os
import secrets

import pytest

from conformance.suites.storage.page_pools import SPEC_ENV


class Clients:
    """Opens clients of the spec under test and closes them after the test."""

    def __init__(self, spec: str, cluster):
        self.spec, self.cluster, self._open = spec, cluster, []

    def open(self):
        from hicache_ref.storage.registry import open_storage

        store = open_storage(self.spec)
        self._open.append(store)
        return store

    def close_all(self) -> None:
        while self._open:
            self._open.pop().close()


@pytest.fixture(scope="session")
def storage_spec():
    """(concrete spec, cluster or None). `mooncake:auto[,opts]` starts one loopback cluster per
    session (and xdist worker) so that the suite can restart its master."""
    spec = os.environ.get(SPEC_ENV, "").strip()
    if not spec:
        pytest.skip(f"no storage spec: run `hicache conform --storage SPEC` (or set ${SPEC_ENV})")
    from hicache_ref.storage.mooncake_cluster import Unavailable, resolve_auto

    try:
        spec, cluster = resolve_auto(spec)
    except Unavailable as e:
        pytest.skip(f"storage {spec!r} unavailable: {e.reason}")
    try:
        probe = _open(spec)
    except BaseException:
        if cluster is not None:
            cluster.stop()
        raise
    probe.close()
    yield spec, cluster
    if cluster is not None:
        cluster.stop()


def _open(spec: str):
    from hicache_ref.storage.registry import open_storage

    try:
        return open_storage(spec)
    except RuntimeError as e:  # the backend cannot run here: everything is NOT RUN, with its reason
        pytest.skip(f"storage unavailable: {e}")


@pytest.fixture
def clients(storage_spec):
    c = Clients(*storage_spec)
    yield c
    c.close_all()


@pytest.fixture(scope="session")
def _shared_store(storage_spec):
    store = _open(storage_spec[0])
    yield store
    store.close()


class _Registrations:
    def __init__(self, store):
        self.store, self.pools = store, []

    def __call__(self, pool):
        self.store.register_host_pool(pool)
        self.pools.append(pool)


@pytest.fixture
def store(_shared_store):
    """The session's client of the spec under test (some stores take seconds to close a client);
    its stats are zeroed for each test, and pools it registered are unregistered after it."""
    from hicache_ref.storage.client_stats import StorageStats

    _shared_store.stats = StorageStats()
    yield _shared_store


@pytest.fixture
def register(store):
    """register(pool): register a host pool with the client for this test only."""
    r = _Registrations(store)
    yield r
    for pool in r.pools:
        store.unregister_host_pool(pool)


@pytest.fixture
def unique(_shared_store):
    """Key factory: keys unique to this test run, so a persistent store's old objects never answer;
    the objects stored under them are removed after the test (the suite may run against a store
    in use: it leaves nothing of its own behind)."""
    run, made = secrets.token_hex(6), []

    def key(name: str) -> str:
        made.append(f"hcconform-{run}-{name}")
        return made[-1]

    yield key
    for k in made:
        if _shared_store.exists([k]):
            _shared_store._discard_quietly(k)
