"""Seed-config transfer plans meet the hardware profile's segment-count targets (what `hicache plan` checks)."""

from __future__ import annotations

import numpy as np
import pytest

from hal.layouts import KVGeometry, parse_dtype
from hal.plan import plan_pool_transfer

# The P800 seed configuration: MLA latent, 78 layers, kv_dim 576, bf16, 64-token pages,
# 32,768 contiguous tokens. Its segment counts come from the seed work and hold on any
# device: page_first_direct makes one descriptor per (page, layer) = 512 * 78, layer_first
# one per layer.
SEED = {"attention": "mla", "layers": 78, "heads": 1, "head_dim": 576, "dtype": "bf16", "page_size": 64,
        "tokens": 32768}
SEED_SEGMENTS = {"layer_first": 78, "page_first_direct": 39_936}
METRIC_OF_LAYOUT = {"layer_first": "plan_segments_layer_first_seed",
                    "page_first_direct": "plan_segments_page_first_direct_seed"}


def seed_plan(layout: str, direction: str):
    geom = KVGeometry(SEED["attention"], SEED["layers"], SEED["heads"], SEED["head_dim"],
                      parse_dtype(SEED["dtype"]), SEED["page_size"])
    tokens = np.arange(SEED["tokens"], dtype=np.int64)
    return plan_pool_transfer(layout, geom, SEED["tokens"], tokens, tokens, direction)


def test_profile_metrics_describe_the_same_seed_config():
    # The profile's *_seed metrics are defined on hal.profiles.SEED_PLAN: it must be this config.
    from hal.profiles import SEED_PLAN

    assert {k: SEED_PLAN[k] for k in SEED} == SEED


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
@pytest.mark.parametrize("layout", list(SEED_SEGMENTS))
def test_seed_plan_segments_meet_targets(profile, layout, direction):
    plan = seed_plan(layout, direction)
    assert plan.nbytes == SEED["tokens"] * SEED["layers"] * SEED["head_dim"] * 2  # every byte, once
    targets = [t for t in (profile.targets if profile is not None else ()) if t.metric == METRIC_OF_LAYOUT[layout]]
    if not targets:  # no profile, or one without this target: the seed work's own number
        assert plan.num_segments == SEED_SEGMENTS[layout]
    for t in targets:
        assert t.check(plan.num_segments), (
            f"{t.name}: {plan.num_segments} segments, target {t.describe()} (source: {t.source})")
