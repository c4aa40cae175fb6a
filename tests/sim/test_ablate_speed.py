"""Replay speedups change no figure: priced page jobs plan exactly what their token slots would."""

from __future__ import annotations

import numpy as np
import pytest

from hal.transfer.direction import Direction
from hal.transfer.layer_plans import LayerPlanner
from hal.transfer.layouts import KVGeometry, parse_dtype
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.trace.synth import synthesize
from hicache_ref.spec import CacheSpec

GEOM = KVGeometry("mla", 3, 1, 8, parse_dtype("bf16"), 4)


def slots(pages: np.ndarray, ps: int) -> np.ndarray:
    return (pages[:, None] * ps + np.arange(ps)).reshape(-1)


@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct"])
@pytest.mark.parametrize("direction", [Direction.D2H, Direction.H2D])
def test_layer0_of_pages_equals_layer0_of_their_slots(layout, direction):
    planner = LayerPlanner(layout, GEOM, 64)
    host, dev = np.array([3, 4, 5, 9, 0], dtype=np.int64), np.array([7, 8, 2, 1, 6], dtype=np.int64)
    by_page = planner.layer0_pages(direction, host, dev)
    by_slot = planner.layer0(direction, slots(host, 4), slots(dev, 4))
    assert (by_page.nbytes, by_page.num_segments) == (by_slot.nbytes, by_slot.num_segments)
    # hand count, layer_first: host pages 3,4,5 | 9 | 0 and device 7,8 | 2 | 1 | 6 break into 4 runs
    if layout == "layer_first":
        assert by_page.num_segments == 4 * 1  # MLA: one K/V part per layer
        assert by_page.nbytes == 5 * 4 * 8 * 2  # 5 pages x 4 tokens x kv_dim 8 x 2 bytes


def test_priced_replay_counts_what_the_byte_moving_replay_moves():
    """count (priced page jobs) and emu (real bytes through token slots) give the same transfer figures."""
    reqs = synthesize(40, 100, 800, 0.7, sessions=4, seed=9)
    kw = dict(page_size=16, l1_tokens=2048, l2_tokens=4096, layers=3, kv_dim=8, write_policy="write_through")
    priced, moved = replay(CacheSpec.of(**kw), reqs), replay(CacheSpec.of(materialize=True, **kw), reqs)
    assert priced["d2h_tokens"] > 0 and priced["h2d_tokens"] > 0
    keys = [f"{d}_{k}" for d in ("d2h", "h2d") for k in ("tokens", "bytes", "segments", "transfers")]
    assert {k: priced[k] for k in keys} == {k: moved[k] for k in keys}
    assert priced["modeled_transfer_seconds"] == moved["modeled_transfer_seconds"]
    assert moved["kv_mismatch_tokens"] == 0


@pytest.mark.parametrize("attention,layout", [("mla", "layer_first"), ("mla", "page_first"),
                                              ("mla", "page_first_direct"), ("mha", "layer_first"),
                                              ("mha", "page_first_direct"), ("mha", "page_head")])
def test_page_totals_of_a_batch_equal_each_jobs_own_plan(attention, layout):
    """One pass over a batch counts what one layer-0 plan per job counts; runs never join two jobs."""
    geom = KVGeometry(attention, 3, 1 if attention == "mla" else 2, 8, parse_dtype("bf16"), 4)
    planner = LayerPlanner(layout, geom, 256)
    rng = np.random.default_rng(5)
    jobs = [(np.array([3, 4], dtype=np.int64), np.array([10, 11], dtype=np.int64)),
            (np.array([5, 6], dtype=np.int64), np.array([12, 13], dtype=np.int64)),  # continues job 0 on both sides
            (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))]
    for _ in range(30):
        n = int(rng.integers(1, 12))
        jobs.append((rng.choice(64, n, replace=False).astype(np.int64), rng.choice(64, n, replace=False).astype(np.int64)))
    want = [(p.nbytes, p.num_segments) for p in (planner.layer0_pages(Direction.D2H, h, d) for h, d in jobs)]
    assert planner.page_totals(jobs) == want
    if layout == "layer_first":  # by hand: two runs of 2 pages (not one of 4): parts x 2 pages x 4 tokens x heads x 8 x 2 B
        parts, heads = geom.parts, geom.heads
        assert want[:2] == [(parts * 2 * 4 * heads * 8 * 2, parts)] * 2
