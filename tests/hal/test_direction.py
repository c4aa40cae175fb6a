"""Direction: one type for d2h/h2d, interchangeable with the strings callers pass."""

import json

import numpy as np
import pytest
import torch

from hal.backend import get_backend
from hal.transfer.direction import Direction
from hal.transfer.layouts import KVGeometry
from hal.transfer.plan import CopyGroup, Segments, TransferPlan, plan_pool_transfer
from hardware_profiles import load_profile


def test_direction_is_its_string():
    assert Direction("d2h") is Direction.D2H and Direction.H2D == "h2d"
    assert f"{Direction.D2H}_bytes" == "d2h_bytes" and json.dumps({"d": Direction.H2D}) == '{"d": "h2d"}'
    assert {"d2h": 1}[Direction.D2H] == 1
    assert [Direction.of(True, False), Direction.of(False, True), Direction.of(True, True), Direction.of(False, False)] \
        == ["d2h", "h2d", "d2d", "h2h"]
    assert Direction.D2H.crosses_host_link and not Direction.H2H.crosses_host_link


def test_plans_carry_a_direction_from_planner_and_backend():
    geom = KVGeometry("mla", 2, 1, 16, torch.bfloat16, 4)
    for d in ("d2h", Direction.H2D):
        assert plan_pool_transfer("layer_first", geom, 8, [0, 1], [2, 3], d).direction is Direction(d)
    with pytest.raises(ValueError, match="direction"):
        plan_pool_transfer("layer_first", geom, 8, [0], [0], "d2d")
    emu = get_backend("emu")
    dev, host = emu.alloc_device((16,), torch.uint8), torch.zeros(16, dtype=torch.uint8)
    one = Segments(np.array([0]), np.array([0]), np.array([16]))
    plan = TransferPlan("t", [CopyGroup(dev, host, one)])
    emu.execute(plan).wait()
    assert plan.direction is Direction.D2H
    emu.close()


def test_link_model_takes_either_spelling():
    link = load_profile("p800").link
    assert link.seconds(Direction.H2D, 1 << 20, 4) == link.seconds("h2d", 1 << 20, 4) is not None
    assert link.seconds(Direction.D2D, 1 << 20, 4) is None
    with pytest.raises(ValueError, match="direction"):
        link.seconds("sideways", 1, 1)
