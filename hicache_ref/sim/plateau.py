"""Where a hit-rate-vs-capacity curve stops paying: the plateau rule of `hicache sweep`.

Past the plateau, more L2 only adds registered (pinned) memory, which slows DMA and RDMA
registration, for almost no hits: the capacity to deploy is the last tier that still gained.
"""

from __future__ import annotations

from typing import NamedTuple

DEFAULT_PLATEAU_GAIN = 0.01


class Plateau(NamedTuple):
    marginal_gains: list[float]  # per tier: hit rate minus the previous tier's (the first: minus L1 alone)
    plateau_l2_tokens: int  # the capacity to deploy (0: L1 alone already on the plateau)
    on_plateau: bool  # False: no tier gained less than the threshold, the curve may still rise


def find_plateau(l2_tokens: list[int], hit_rates: list[float], l1_alone_hit_rate: float,
                 plateau_gain: float = DEFAULT_PLATEAU_GAIN) -> Plateau:
    """The tier just before the first whose marginal hit-rate gain is below `plateau_gain`
    (0 when that is the first tier: L1 alone); if none falls below it, the largest tier and
    on_plateau False. `l2_tokens` strictly increasing, one hit rate per tier."""
    if not l2_tokens:
        raise ValueError("l2_tokens: expected at least one tier")
    if len(hit_rates) != len(l2_tokens):
        raise ValueError(f"hit_rates: {len(hit_rates)} values for {len(l2_tokens)} tiers")
    if any(b <= a for a, b in zip(l2_tokens, l2_tokens[1:], strict=False)):
        raise ValueError(f"l2_tokens: tiers must be strictly increasing, got {list(l2_tokens)}")
    if isinstance(plateau_gain, bool) or not isinstance(plateau_gain, (int, float)) or not 0 <= plateau_gain <= 1:
        raise ValueError(f"plateau_gain: expected a number in [0, 1], got {plateau_gain!r}")
    gains, previous = [], l1_alone_hit_rate
    for h in hit_rates:
        gains.append(h - previous)
        previous = h
    for i, g in enumerate(gains):
        if g < plateau_gain:
            return Plateau(gains, l2_tokens[i - 1] if i else 0, True)
    return Plateau(gains, l2_tokens[-1], False)
