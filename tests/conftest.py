"""Shared fixtures of the harness tests."""

from __future__ import annotations

import sys

import pytest

# The ensembles every command draws include the derived parameters' covariance once this is imported
# (the CLI imports it before a command runs); imported here so no test's intervals depend on which
# tests ran before it in the same process.
import hicache_ref.sim.fit.derivation_cache  # noqa: F401


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)  # lets fixtures see whether their test failed


def _start_cluster(log_dir):
    from hicache_ref.storage.mooncake_cluster import Unavailable, start_loopback

    try:
        return start_loopback(str(log_dir))
    except Unavailable as e:
        pytest.skip(f"mooncake: {e.reason}")


@pytest.fixture(scope="session")
def mooncake_cluster(tmp_path_factory, request):
    """A loopback Mooncake cluster (metadata server + master) shared by a session's tests;
    skipped with the reason only when the wheel or its libraries are absent."""
    cluster = _start_cluster(tmp_path_factory.mktemp("mooncake-logs"))
    yield cluster
    cluster.stop()
    if request.session.testsfailed:
        print(f"\nmooncake cluster logs ({cluster.log_dir}):\n{cluster.log_tail()}", file=sys.stderr)


@pytest.fixture
def fresh_mooncake_cluster(tmp_path, request):
    """A cluster of one test's own (for tests that kill or restart it); its logs print if the test fails."""
    cluster = _start_cluster(tmp_path / "mooncake-logs")
    yield cluster
    cluster.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\nmooncake cluster logs ({cluster.log_dir}):\n{cluster.log_tail()}", file=sys.stderr)


@pytest.fixture(scope="session")
def synthetic():
    """The packaged synthetic trace (the L3 tests replay its first 1,500 requests)."""
    from hicache_ref.sim.trace.reader import find_trace

    path = find_trace("synthetic_trace.jsonl")
    assert path is not None, "the packaged synthetic trace is missing"
    return path
