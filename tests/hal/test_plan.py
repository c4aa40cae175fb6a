"""Segment planner: merging, seed segment counts, and agreement with a brute-force per-piece plan."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hal.transfer.layouts import HOST_LAYOUTS, MLA_LAYOUTS, KVGeometry, host_layer_shift, host_piece_offsets
from hal.transfer.plan import CopyGroup, Segments, check_group, merge_runs, plan_pool_transfer
from hal.transfer.seed import SEED_GEOMETRY, SEED_TOKENS, seed_geometry, seed_plan


def test_seed_geometry_is_the_p800_seed_config():
    assert SEED_GEOMETRY == KVGeometry("mla", 78, 1, 576, torch.bfloat16, 64) == seed_geometry()
    assert SEED_TOKENS == 32_768
    assert seed_geometry(page_size=1, layers=4) == KVGeometry("mla", 4, 1, 576, torch.bfloat16, 1)
    with pytest.raises(ValueError, match="page_size"):
        seed_geometry(page_size=0)


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("layout,segments", [("layer_first", 78), ("page_first_direct", 39_936)])
def test_seed_config_segment_counts(layout, segments, direction):
    plan = seed_plan(layout, direction)
    assert plan.num_segments == segments and plan.direction == direction
    assert plan.nbytes == 32_768 * 78 * 576 * 2
    assert seed_plan(layout).direction == "h2d"  # the seed transfer is a load


def test_page_first_is_one_segment_per_token_and_layer():
    g = KVGeometry("mla", 4, 1, 64, torch.bfloat16, 16)
    idx = np.arange(256)
    assert plan_pool_transfer("page_first", g, 256, idx, idx, "h2d").num_segments == 256 * 4


def test_merge_runs_breaks_on_either_side():
    src = np.array([0, 8, 16, 40, 48])
    dst = np.array([0, 8, 24, 32, 40])
    seg = merge_runs(src, dst, 8)
    assert seg.src_offsets.tolist() == [0, 16, 40]
    assert seg.dst_offsets.tolist() == [0, 24, 32]
    assert seg.nbytes.tolist() == [16, 8, 16]


def _brute_force_bytes(layout, geom, size, host_idx, dev_idx):
    """Every (part, layer, token, piece) as an explicit (dst buffer, dst byte) -> (src byte) map."""
    pieces = geom.pieces(layout)
    pb = geom.item_size // pieces
    out = {}
    for part in range(geom.parts):
        for layer in range(geom.layers):
            for h, d in zip(host_idx.tolist(), dev_idx.tolist(), strict=True):
                offs = host_piece_offsets(layout, geom, size, np.array([h]))[0]
                for p in range(pieces):
                    host_off = int(offs[p]) + host_layer_shift(layout, geom, size, layer)
                    for b in range(pb):
                        out[(("host", part), host_off + b)] = (("device", part, layer), d * geom.item_size + p * pb + b)
    return out


def _plan_bytes(plan):
    out = {}
    for g in plan.groups:
        for s, d, n in zip(g.segments.src_offsets.tolist(), g.segments.dst_offsets.tolist(), g.segments.nbytes.tolist(), strict=True):
            for b in range(n):
                key = (g.dst, d + b)
                assert key not in out, "a destination byte is written twice"
                out[key] = (g.src, s + b)
    return out


@settings(max_examples=25, deadline=None)
@given(layout=st.sampled_from(HOST_LAYOUTS), attention=st.sampled_from(["mha", "mla"]),
       page_size=st.sampled_from([1, 2, 4]), n_pages=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_plan_matches_brute_force(layout, attention, page_size, n_pages, seed):
    if attention == "mla" and layout not in MLA_LAYOUTS:
        return
    heads = 2 if attention == "mha" else 1
    g = KVGeometry(attention, 2, heads, 4, torch.float16, page_size)
    size = 8 * page_size
    rng = np.random.default_rng(seed)

    def pages():
        p = rng.permutation(size // page_size)[:n_pages]
        return (p[:, None] * page_size + np.arange(page_size)).reshape(-1)

    host_idx, dev_idx = pages(), pages()
    plan = plan_pool_transfer(layout, g, size, host_idx, dev_idx, "d2h")
    assert _plan_bytes(plan) == _brute_force_bytes(layout, g, size, host_idx, dev_idx)
    # Merged: no two segments of one group could have been one.
    for grp in plan.groups:
        s = grp.segments
        joinable = (s.src_offsets[:-1] + s.nbytes[:-1] == s.src_offsets[1:]) & \
                   (s.dst_offsets[:-1] + s.nbytes[:-1] == s.dst_offsets[1:])
        assert not joinable.any()


def test_bad_direction_and_layout_named():
    g = KVGeometry("mla", 2, 1, 8, torch.float16, 1)
    with pytest.raises(ValueError, match="direction"):
        plan_pool_transfer("layer_first", g, 4, np.arange(2), np.arange(2), "sideways")
    with pytest.raises(ValueError, match="layout"):
        plan_pool_transfer("page_head", g, 4, np.arange(2), np.arange(2), "d2h")


@pytest.mark.parametrize("lengths, bad", [([8, 0, 8], "0 bytes"), ([8, -4], "-4 bytes")])
def test_a_segment_of_no_bytes_or_fewer_is_refused_naming_the_group(lengths, bad):
    """A copy engine trusts the plan: a 0-byte or negative segment must never reach it."""
    src, dst = torch.zeros(64, dtype=torch.uint8), torch.zeros(64, dtype=torch.uint8)
    n = len(lengths)
    offs = np.arange(n, dtype=np.int64) * 16
    check_group("load", 0, CopyGroup(src, dst, Segments(offs, offs, np.full(n, 8, dtype=np.int64))))  # fine
    with pytest.raises(ValueError, match=f"^plan load: groups\\[3\\] has a segment of {bad}"):
        check_group("load", 3, CopyGroup(src, dst, Segments(offs, offs, np.array(lengths, dtype=np.int64))))
