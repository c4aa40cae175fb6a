"""HiCache end to end on emu with real bytes: L1 -> backup -> evict -> load back, per host layout; errors surface."""

import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.suites import reference as ref
from hal.backend import get_backend, register
from hal.backends.emu import EmuBackend, EmuStream
from hicache_ref.core.controller import TransferError
from hicache_ref.core.synthetic_kv import synthetic_kv
from hicache_ref.spec import CacheSpec

PS = 16
A = np.arange(0, 96, dtype=np.uint32)  # 6 pages
U = np.arange(5000, 5128, dtype=np.uint32)  # 8 pages, unrelated


def _cache(backend, attention, layout, l1=128, l2=512, policy="write_through"):
    spec = CacheSpec.of(page_size=PS, l1_tokens=l1, l2_tokens=l2, write_policy=policy, host_layout=layout,
                     attention=attention, layers=3, heads=2 if attention == "mha" else 1, kv_dim=8, dtype="bf16",
                     materialize=True)
    return spec.build(backend)


def _device_kv_matches(cache, tokens) -> bool:
    """Read L1 back (through hal, as the cache does) and compare it here, independently of the
    cache's own check: rows at the matched slots."""
    m = cache.tree.match_prefix(tokens)
    assert m.device_len == len(tokens)
    for part, layers in enumerate(cache.kv.read(m.device_indices)):
        for layer, t in enumerate(layers):
            rows = t.view(torch.uint8).reshape(t.shape[0], -1)
            want = torch.from_numpy(synthetic_kv(tokens, np.arange(len(tokens)), part, layer, rows.shape[1]))
            if not torch.equal(rows, want):
                return False
    return True


@pytest.fixture(scope="module")
def emu():
    return get_backend("emu", "emu")


@pytest.mark.parametrize("attention,layout", [("mha", x) for x in ref.MHA_LAYOUTS] +
                         [("mla", x) for x in ref.MLA_LAYOUTS])
@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_kv_survives_backup_eviction_and_load_back_bit_for_bit(emu, attention, layout, policy):
    with _cache(emu, attention, layout, policy=policy) as cache:
        first = cache.request(A)
        assert (first.l1_hit_tokens, first.l2_hit_tokens, first.cached_tokens) == (0, 0, 96)
        cache.request(U)  # 8 pages in an 8-page L1: A leaves L1 (its KV now only in L2)
        m = cache.tree.match_prefix(A)
        assert (m.device_len, m.host_len) == (0, 96)
        again = cache.request(A)  # loaded back H2D, per layer, then checked
        assert (again.l1_hit_tokens, again.l2_hit_tokens, again.kv_mismatch_tokens) == (0, 96, 0)
        cache.settle()
        assert _device_kv_matches(cache, A)
        h2d = cache.controller.stats().h2d
        assert h2d.tokens == 96 and h2d.transfers == 1


def test_a_corrupted_host_copy_is_caught_on_load_back(emu):
    with _cache(emu, "mha", "page_head") as cache:
        cache.request(A)
        cache.request(U)
        cache.settle()
        host_slots = torch.from_numpy(cache.tree.match_prefix(A).host_indices[:PS])  # A's first page
        logical = ref.host_to_logical("page_head", "mha", torch.stack(cache.host.buffers), PS)
        logical[:, :, host_slots] = 0  # wipe it in the logical view, write it back in layout
        restored = ref.logical_to_host("page_head", "mha", logical, PS)
        for part, t in enumerate(cache.host.buffers):
            t.copy_(restored[part])
        again = cache.request(A)
        assert again.l2_hit_tokens == 96 and again.kv_mismatch_tokens == PS


def test_hits_in_l1_are_checked_too(emu):
    with _cache(emu, "mla", "page_first_direct", l1=256) as cache:
        cache.request(A)
        longer = np.concatenate([A, np.arange(900, 950, dtype=np.uint32)])
        res = cache.request(longer)
        assert (res.l1_hit_tokens, res.kv_mismatch_tokens, res.cached_tokens) == (96, 0, 144)
        assert _device_kv_matches(cache, longer[:144])


# -- a failing stream, registered as an out-of-tree backend would be --------------------------------

class _FaultyStream(EmuStream):
    def _account(self, plan):
        raise OSError(5, "injected DMA fault")


class _FaultyBackend(EmuBackend):
    """Streams the controller creates fail every plan; the default stream works."""

    name = "emu-faulty-e2e"

    def new_stream(self):
        self._streams_made += 1
        return self._track(_FaultyStream(self, f"faulty{self._streams_made}"))


register("emu-faulty-e2e", _FaultyBackend)


def test_a_failing_transfer_stream_surfaces_on_the_next_request_and_close_does_not_hang():
    backend = get_backend("emu-faulty-e2e", "emu")
    cache = _cache(backend, "mha", "layer_first")
    cache.request(A)  # its write-through backup is queued; the stream will fail it
    with pytest.raises(TransferError, match="d2h transfer") as info:
        cache.request(U)
    assert "injected DMA fault" in repr(info.value.__cause__.__cause__ or info.value.__cause__)
    with pytest.raises(TransferError):  # fail-stop: the cache does not carry on silently
        cache.request(A)
    cache.close(timeout=10)


class _GatedBackend(EmuBackend):
    """Submissions on the controller's streams block until `gate` opens (a stuck DMA submission)."""

    name = "emu-gated-e2e"
    gate = threading.Event()

    def execute(self, plan, stream=None):
        if stream is not self.default_stream():
            self.gate.wait()
        return super().execute(plan, stream)


register("emu-gated-e2e", _GatedBackend)


def test_close_with_a_stuck_transfer_thread_leaves_the_pools_open():
    _GatedBackend.gate.clear()
    cache = _cache(get_backend("emu-gated-e2e", "emu"), "mla", "layer_first")
    cache.request(A)  # its write-through backup is submitted and stuck
    with pytest.raises(TimeoutError, match="hicache-d2h"):
        cache.close(timeout=0.3)
    # The stuck copy may still land: its destination must stay mapped and registered.
    assert cache.host.buffers is not None and not cache.host.host_buffer.closed
    assert cache.device.buffers is not None
    _GatedBackend.gate.set()  # only now: the copy lands in memory that is still ours
    for d in cache.controller._dirs.values():
        d.submitter.join(10)
        d.watcher.join(10)
    cache.host.close()
    cache.device.close()


# -- random traffic through tree + pools + controller, real bytes ----------------------------------

_BLOCK = 2 * PS


def _tokens(blocks, cut):
    """Prefix-chained blocks (equal ids at equal positions after equal prefixes share tokens)."""
    ids = [hash(tuple(blocks[: i + 1])) % 1_000_003 for i in range(len(blocks))]
    t = (np.asarray(ids, dtype=np.uint32)[:, None] * _BLOCK + np.arange(_BLOCK, dtype=np.uint32)).reshape(-1)
    return t[: max(1, len(t) - cut)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=5), st.integers(0, 40)),
                         min_size=1, max_size=14),
       policy=st.sampled_from(["write_through", "write_back", "write_through_selective"]),
       layout=st.sampled_from(ref.MHA_LAYOUTS), l1_pages=st.integers(6, 16), l2_pages=st.integers(0, 24))
@pytest.mark.slow
def test_random_requests_keep_kv_exact_and_pools_consistent(requests, policy, layout, l1_pages, l2_pages):
    backend = get_backend("emu", "emu")
    with _cache(backend, "mha", layout, l1=l1_pages * PS, l2=l2_pages * PS, policy=policy) as cache:
        for blocks, cut in requests:
            tokens = _tokens(blocks, cut)
            res = cache.request(tokens)
            assert res.kv_mismatch_tokens == 0
            assert res.l1_hit_tokens + res.l2_hit_tokens <= len(tokens)
            # No live request between calls: every allocated slot belongs to the tree.
            assert cache.device.allocator.used_tokens == cache.tree.tiers.device_pages * PS
            if cache.host is not None:
                assert cache.host.allocator.used_tokens == cache.tree.tiers.host_pages * PS
