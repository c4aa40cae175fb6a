"""Transfer plans piece by piece (hal.transfer.plan): counted plans, totals, the merge of runs,
groups per buffer pair, pool-transfer defaults, and check_group's refusals naming the group."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hal.transfer.direction import Direction
from hal.transfer.layouts import KVGeometry
from hal.transfer.plan import (
    COUNTED,
    LAYER_BUFFERS,
    CopyGroup,
    CountedSegments,
    Segments,
    Side,
    TransferPlan,
    check_group,
    merge_runs,
    plan_copy,
    plan_pool_transfer,
    shifted,
    stacked_groups,
)

MHA = KVGeometry("mha", 3, 2, 4, torch.float16, 2)  # item: 2 heads x 4 x 2 bytes = 16 bytes a token


def seg(src, dst, nbytes):
    return Segments(*(np.array(x, dtype=np.int64) for x in (src, dst, nbytes)))


def test_a_counted_plan_prices_by_its_totals_and_a_moving_one_by_its_segments():
    p = TransferPlan.counted("load", "h2d", 3, 12, nbytes=1000, segments=7)
    assert (p.op, p.direction, p.launches, p.kernel_items) == ("load", "h2d", 3, 12)
    (g,) = p.groups
    assert g.src is COUNTED and g.dst is COUNTED and g.segments == CountedSegments(1000, 7)
    assert p.totals == (1000, 7) and p.nbytes == 1000 and p.num_segments == 7
    moving = TransferPlan("copy", [CopyGroup("a", "b", seg([0, 64], [0, 32], [16, 8])),
                                   CopyGroup("c", "d", seg([8], [8], [4]))])
    assert moving.totals is None and moving.nbytes == 28 and moving.num_segments == 3
    assert (moving.direction, moving.launches, moving.kernel_items) == ("?", 1, None)
    mixed = TransferPlan("copy", [*moving.groups, *p.groups])
    assert mixed.totals == (1028, 10)


def test_merge_runs_of_no_pieces_one_piece_and_int32_offsets():
    empty = merge_runs(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 8)
    assert [a.tolist() for a in empty] == [[], [], []] and all(a.dtype == np.int64 for a in empty)
    one = merge_runs(np.array([40]), np.array([8]), 8)
    assert [a.tolist() for a in one] == [[40], [8], [8]]
    runs = merge_runs(np.array([0, 4, 8, 20], dtype=np.int32), np.array([0, 4, 8, 12], dtype=np.int32), 4)
    assert [a.tolist() for a in runs] == [[0, 20], [0, 12], [12, 4]]
    assert all(a.dtype == np.int64 for a in runs)


def test_shifted_moves_each_side_by_its_own_shift():
    base = seg([0, 16], [32, 48], [8, 8])
    assert shifted(base, 0, 0) is base
    for s_shift, d_shift in ((100, 0), (0, 100), (5, 7)):
        out = shifted(base, s_shift, d_shift)
        assert out.src_offsets.tolist() == [s_shift, 16 + s_shift]
        assert out.dst_offsets.tolist() == [32 + d_shift, 48 + d_shift] and out.nbytes.tolist() == [8, 8]


def test_stacked_groups_make_one_group_per_buffer_pair_in_first_seen_order():
    base = seg([0], [0], [4])
    a, b, c = object(), object(), object()
    groups = stacked_groups(base, [(a, b, 0, 0), (c, b, 0, 10), (a, b, 100, 200), (a, c, 7, 7),
                                   (a, b, 300, 400)])
    assert [(g.src, g.dst) for g in groups] == [(a, b), (c, b), (a, c)]
    assert groups[0].segments.src_offsets.tolist() == [0, 100, 300]
    assert groups[0].segments.dst_offsets.tolist() == [0, 200, 400]
    assert groups[0].segments.nbytes.tolist() == [4, 4, 4]
    assert groups[1].segments.dst_offsets.tolist() == [10] and groups[1].segments.nbytes.tolist() == [4]


@pytest.mark.parametrize("direction", ["d2h", "h2d", Direction.H2D])
def test_a_pool_transfer_names_its_op_and_direction_and_covers_every_part_and_layer(direction):
    tokens = np.arange(4)
    plan = plan_pool_transfer("layer_first", MHA, 8, tokens, tokens, direction)
    assert plan.op == f"{Direction(direction)}_layer_first" and plan.direction is Direction(direction)
    # the device pool is a buffer per part and layer: a group each, 4 contiguous tokens a segment
    assert len(plan.groups) == 2 * 3 and plan.num_segments == 2 * 3
    assert plan.nbytes == 2 * 3 * 4 * MHA.item_size
    d2h = str(direction) == "d2h"
    ends = [(g.dst, g.src) if d2h else (g.src, g.dst) for g in plan.groups]
    assert ends == [(("host", p), ("device", p, layer)) for p in range(2) for layer in range(3)]
    host_at = [int((g.segments.dst_offsets if d2h else g.segments.src_offsets)[0]) for g in plan.groups]
    assert host_at == [layer * 8 * MHA.item_size for _ in range(2) for layer in range(3)]
    some = plan_pool_transfer("layer_first", MHA, 8, tokens, tokens, direction, layers=[2], op="mine")
    assert some.op == "mine" and some.num_segments == 2
    devices = {g.src if d2h else g.dst for g in some.groups}
    assert devices == {("device", 0, 2), ("device", 1, 2)}


def test_a_pool_transfer_between_real_buffers_moves_the_right_bytes():
    """h2d of host page_first tokens [2, 3] into device slots [0, 1], into real tensors."""
    host = [torch.arange(8 * 3 * 16, dtype=torch.int32).to(torch.uint8) + p for p in range(2)]
    dev = [{layer: torch.zeros(4 * 16, dtype=torch.uint8) for layer in range(3)} for _ in range(2)]
    plan = plan_pool_transfer("page_first", MHA, 8, np.array([2, 3]), np.array([0, 1]), "h2d",
                              host_bufs=host, device_bufs=dev)
    for i, g in enumerate(plan.groups):
        check_group(plan.op, i, g)
        for s, d, n in zip(*(a.tolist() for a in g.segments), strict=True):
            g.dst[d : d + n] = g.src[s : s + n]
    for part in range(2):
        for layer in range(3):
            want = torch.cat([host[part][(t * 3 + layer) * 16 : (t * 3 + layer + 1) * 16] for t in (2, 3)])
            assert torch.equal(dev[part][layer][:32], want)


def test_check_group_refuses_what_no_copy_engine_may_run_naming_the_group():
    buf = torch.zeros(64, dtype=torch.uint8)

    def refusal(group):
        with pytest.raises(ValueError) as e:
            check_group("load", 2, group)
        return str(e.value)

    assert refusal(CopyGroup(COUNTED, COUNTED, CountedSegments(8, 1))) == \
        "plan load: groups[2] is counted only (no segments): it prices a run, it cannot move one"
    assert refusal(CopyGroup(buf, buf, seg([0, 8], [0], [8, 8]))) == \
        "plan load: groups[2] has offset and length arrays of different sizes"
    assert refusal(CopyGroup(buf, buf, seg([0], [0, 8], [8]))) == \
        "plan load: groups[2] has offset and length arrays of different sizes"
    assert refusal(CopyGroup("host", buf, seg([0], [0], [8]))) == \
        "plan load: groups[2].src is 'host', not a tensor (a plan built without memory cannot run)"
    assert refusal(CopyGroup(buf, ("device", 0), seg([0], [0], [8]))) == \
        "plan load: groups[2].dst is ('device', 0), not a tensor (a plan built without memory cannot run)"
    strided = torch.zeros(8, 16, dtype=torch.uint8)[:, :4]
    assert refusal(CopyGroup(buf, strided, seg([0], [0], [8]))) == "plan load: groups[2].dst is not contiguous"
    assert refusal(CopyGroup(strided, buf, seg([0], [0], [8]))) == "plan load: groups[2].src is not contiguous"
    wide = torch.zeros(16, dtype=torch.int32)  # 64 bytes: the bound is in bytes, not elements
    for src_off, dst_off, name in (([57], [0], "src"), ([0], [-1], "dst"), ([0], [60], "dst")):
        assert refusal(CopyGroup(wide, buf, seg(src_off, dst_off, [8]))) == \
            f"plan load: groups[2].{name}: a segment falls outside the 64-byte buffer"
    check_group("load", 2, CopyGroup(wide, buf, seg([56, 0], [0, 56], [8, 8])))  # ends exactly at the end
    check_group("load", 2, CopyGroup(wide, buf, seg([], [], [])))  # nothing to move is fine
    check_group("load", 2, CopyGroup(wide, buf, seg([63], [0], [1])))  # one byte is a segment


def test_a_page_head_transfer_is_cut_in_a_piece_per_head_on_both_sides():
    """page_head keeps each head of a token apart: a plan moves a head's bytes (item / heads) per
    segment, the device side cut in the same pieces; a load puts back what a backup took."""
    hb = MHA.item_size // MHA.heads
    host_tokens, dev_tokens = np.array([4, 5]), np.array([1, 2])
    plan = plan_pool_transfer("page_head", MHA, 8, host_tokens, dev_tokens, "d2h")
    assert plan.num_segments == 2 * 3 * 2 * MHA.heads and plan.nbytes == 2 * 3 * 2 * MHA.item_size
    assert {int(n) for g in plan.groups for n in g.segments.nbytes} == {hb}
    rng = np.random.default_rng(0)
    dev = [{layer: torch.from_numpy(rng.integers(0, 256, 4 * MHA.item_size, dtype=np.uint8))
            for layer in range(3)} for _ in range(2)]
    host = [torch.zeros(8 * 3 * MHA.item_size, dtype=torch.uint8) for _ in range(2)]
    back = [{layer: torch.zeros(4 * MHA.item_size, dtype=torch.uint8) for layer in range(3)} for _ in range(2)]
    for direction, h_bufs, d_bufs in (("d2h", host, dev), ("h2d", host, back)):
        moving = plan_pool_transfer("page_head", MHA, 8, host_tokens, dev_tokens if direction == "d2h"
                                    else np.array([0, 3]), direction, host_bufs=h_bufs, device_bufs=d_bufs)
        for i, g in enumerate(moving.groups):
            check_group(moving.op, i, g)
            for s, d, n in zip(*(a.tolist() for a in g.segments), strict=True):
                g.dst[d : d + n] = g.src[s : s + n]
    item = MHA.item_size
    for part in range(2):
        for layer in range(3):
            assert torch.equal(back[part][layer][0:item], dev[part][layer][item : 2 * item])
            assert torch.equal(back[part][layer][3 * item : 4 * item], dev[part][layer][2 * item : 3 * item])


def test_a_copy_between_two_device_pools_is_one_segment_per_run_of_tokens():
    """Neither side has a host layout: items are whole, a run of tokens one segment per layer and part."""
    src = Side(LAYER_BUFFERS, [{layer: ("a", p, layer) for layer in range(3)} for p in range(2)], 0)
    dst = Side(LAYER_BUFFERS, [{layer: ("b", p, layer) for layer in range(3)} for p in range(2)], 0)
    plan = plan_copy("d2d", MHA, src, dst, np.array([0, 1, 2, 6]), np.array([5, 6, 7, 9]), [0, 2])
    assert [(g.src, g.dst) for g in plan.groups] == [(("a", p, layer), ("b", p, layer))
                                                     for p in range(2) for layer in (0, 2)]
    item = MHA.item_size
    for g in plan.groups:
        assert g.segments.src_offsets.tolist() == [0, 6 * item] and g.segments.dst_offsets.tolist() == [5 * item, 9 * item]
        assert g.segments.nbytes.tolist() == [3 * item, item]
