"""Loads of one scheduling step merged into one submission (CacheController.merged_loads, served replay).

Geometry: MHA, 2 layers, 1 head, head_dim 4, fp16, so a load has 2 parts (K, V) x 2 layers =
4 (part, layer) pairs; a transfer whose pages are contiguous on both sides is one segment
per pair, and a load is one launch per layer.
"""

import numpy as np
import pytest

from hal.backend import get_backend
from hicache_ref.core.controller import CacheController
from hicache_ref.core.pools import DevicePool, HostPool
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.run.served_replay import replay_served
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.spec import CacheSpec

SPEC = CacheSpec.of(page_size=2, attention="mha", layers=2, heads=1, kv_dim=4, dtype="fp16")
GEOM = SPEC.geometry.kv()


@pytest.fixture(scope="module", params=["count", "emu"])
def backend(request):
    return get_backend(request.param, "emu")


def _controller(backend):
    dp = DevicePool(GEOM, 16, backend=backend, materialize=True)
    hp = HostPool(GEOM, 16, "layer_first", backend=backend, materialize=True)
    return CacheController(dp, hp, backend)


def test_two_adjacent_loads_held_in_one_step_are_one_submission(backend):
    # Loads host [0 1] -> device [4 5] and host [2 3] -> device [6 7]: the second continues
    # the first on both sides, so merged they are host [0..3] -> device [4..7], one run per
    # (part, layer): 4 segments, one launch per layer (2), one transfer. Apart: 8, 4, 2.
    with _controller(backend) as c:
        with c.merged_loads():
            a = c.load_pages(np.array([0, 1]), np.array([4, 5]), tag="a")
            b = c.load_pages(np.array([2, 3]), np.array([6, 7]), tag="b")
            assert c.pending == 0  # held, not queued yet
        a.wait_all()
        b.wait_all()
        acks = c.flush()
        s = c.stats().h2d
    assert (s.transfers, s.launches, s.segments, s.tokens) == (1, 2, 4, 8)
    assert sorted(ack.tag for ack in acks) == ["a", "b"]  # each held load is acknowledged
    with _controller(backend) as c:
        c.load_pages(np.array([0, 1]), np.array([4, 5]))
        c.load_pages(np.array([2, 3]), np.array([6, 7]))
        c.flush()
        s = c.stats().h2d
    assert (s.transfers, s.launches, s.segments, s.tokens) == (2, 4, 8, 8)


def test_waiting_on_a_held_load_submits_what_is_held(backend):
    with _controller(backend) as c:
        with c.merged_loads():
            a = c.load_pages(np.array([0]), np.array([3]))
            a.wait_all(timeout=10)  # would hang if holding meant waiting for the block's end
            b = c.load_pages(np.array([1]), np.array([4]))
        b.wait_all(timeout=10)
        c.flush()
        assert c.stats().h2d.transfers == 2
        with pytest.raises(RuntimeError, match="already open"), c.merged_loads(), c.merged_loads():
            pass


def _trace():
    # page = block = 512 tokens. Steps (timestamps 30 ms apart, step 30 ms): step 0 r0 (1), r1 (2);
    # step 1 r2 (3 4), which evicts r0 and r1 from the 2-page L1 (both backed up: write_through);
    # step 2 r3 (1) and r4 (2) load them back: host pages 0 and 1 (fifo host, r0 then r1) into
    # device pages 0 and 1 (r2's, freed in that order when r3 evicts it).
    return [TraceRequest(0, 512, 0, (1,)), TraceRequest(0, 512, 0, (2,)), TraceRequest(30, 1024, 0, (3, 4)),
            TraceRequest(60, 512, 0, (1,)), TraceRequest(60, 512, 0, (2,))]


@pytest.mark.parametrize("materialize", [False, True])
def test_a_step_with_two_adjacent_loads_gives_one_launch_per_layer_and_merged_segments(materialize):
    spec = SPEC.replace(**{"page_size": 512, "l1_tokens": 1024, "l2_tokens": 8192,
                    "write_policy": "write_through", "materialize": materialize})
    serial = replay(spec, _trace())
    served = replay_served(spec.replace(concurrency=2, timestamps=True), _trace())
    for fig in (serial, served):
        assert (fig["l2_hit_tokens"], fig["h2d_tokens"], fig["kv_mismatch_tokens"]) == (1024, 1024, 0)
    assert (serial["h2d_transfers"], serial["h2d_launches"], serial["h2d_segments"]) == (2, 4, 8)
    assert (served["h2d_transfers"], served["h2d_launches"], served["h2d_segments"]) == (1, 2, 4)
    assert served["steps"] >= 3 and served["max_in_flight"] == 2


def test_served_materialized_replay_checks_every_held_load_at_step_end(monkeypatch):
    from hicache_ref.core import synthetic_kv

    checked = []
    real = synthetic_kv.KVWriter.mismatches

    def counting(self, tokens, slots):
        checked.append(len(tokens))
        return real(self, tokens, slots)

    monkeypatch.setattr(synthetic_kv.KVWriter, "mismatches", counting)
    spec = SPEC.replace(**{"page_size": 512, "l1_tokens": 1024, "l2_tokens": 8192,
                    "write_policy": "write_through", "materialize": True})
    fig = replay_served(spec.replace(concurrency=2, timestamps=True), _trace())
    # r3 and r4 hit 512 loaded tokens each, checked after the step's merged load landed.
    assert checked == [512, 512] and fig["kv_mismatch_tokens"] == 0
