"""Seed-config transfer plans meet the hardware profile's segment-count targets (what `hicache plan` checks)."""

from __future__ import annotations

import pytest

from hal.transfer.seed import SEED_GEOMETRY, SEED_TOKENS, seed_plan

# The P800 seed transfer (hal.transfer.seed). Its segment counts come from the seed
# work and hold on any device: page_first_direct makes one descriptor per (page, layer) =
# 512 * 78, layer_first one per layer.
SEED_SEGMENTS = {"layer_first": 78, "page_first_direct": 39_936}
METRIC_OF_LAYOUT = {"layer_first": "plan_segments_layer_first_seed",
                    "page_first_direct": "plan_segments_page_first_direct_seed"}


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("layout", list(SEED_SEGMENTS))
def test_seed_plan_segments_meet_targets(profile, layout, direction):
    plan = seed_plan(layout, direction)
    assert plan.nbytes == SEED_TOKENS * SEED_GEOMETRY.layout_dim == 32768 * 78 * 576 * 2  # every byte, once
    targets = [t for t in (profile.targets if profile is not None else ()) if t.metric == METRIC_OF_LAYOUT[layout]]
    if not targets:  # no profile, or one without this target: the seed work's own number
        assert plan.num_segments == SEED_SEGMENTS[layout]
    for t in targets:
        assert t.check(plan.num_segments), (
            f"{t.name}: {plan.num_segments} segments, target {t.describe()} (source: {t.source})")
