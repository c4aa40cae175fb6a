"""Where a hit-rate-vs-capacity curve stops paying: the plateau rule of `hicache sweep`.

Past the plateau, more L2 only adds registered (pinned) memory, which slows DMA and RDMA
registration, for almost no hits: the capacity to deploy is the last tier that still gained.
Where each tier's net benefit is known, the rule runs over the tiers that pay only (paying_plateau):
a tier that loses against HiCache off is never the capacity to deploy, and when none pays there is
no plateau to name (`none_pays`).
"""

from __future__ import annotations

from typing import NamedTuple

DEFAULT_PLATEAU_GAIN = 0.01


class Plateau(NamedTuple):
    marginal_gains: list[float]  # per tier: hit rate minus the previous tier's (the first: minus L1 alone)
    plateau_l2_tokens: int  # the capacity to deploy (0: L1 alone already on the plateau)
    on_plateau: bool  # False: no tier gained less than the threshold, the curve may still rise
    none_pays: bool = False  # every tier's net benefit is a loss: plateau_l2_tokens is None


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


def paying_plateau(l2_tokens: list[int], hit_rates: list[float], l1_alone_hit_rate: float,
                   net_benefits: list[float | None], plateau_gain: float = DEFAULT_PLATEAU_GAIN,
                   floor: float = 0.0) -> Plateau:
    """The plateau among the tiers whose net benefit is above `floor` (0: a gain against HiCache off):
    find_plateau over those tiers alone, in order, and never below the first of them (it pays, so L1
    alone is not the answer). None of them: plateau None, none_pays. Any net benefit unknown (None):
    find_plateau over every tier, by hit rate alone. marginal_gains are every tier's, as find_plateau's."""
    every = find_plateau(l2_tokens, hit_rates, l1_alone_hit_rate, plateau_gain)
    if len(net_benefits) != len(l2_tokens):
        raise ValueError(f"net_benefits: {len(net_benefits)} values for {len(l2_tokens)} tiers")
    if any(n is None for n in net_benefits):
        return every
    paying = [i for i, n in enumerate(net_benefits) if n > floor]
    if not paying:
        return Plateau(every.marginal_gains, None, False, True)
    among = find_plateau([l2_tokens[i] for i in paying], [hit_rates[i] for i in paying], l1_alone_hit_rate,
                         plateau_gain)
    return Plateau(every.marginal_gains, among.plateau_l2_tokens or l2_tokens[paying[0]], among.on_plateau)


def answer_row(rows: list[dict], plateau: Plateau, key: str) -> dict | None:
    """The tier a sweep's answer is for: the plateau tier (the capacity to deploy); when none pays,
    the best tier, so the answer still says how sure the loss is: an undecided tier (its interval
    reaches a gain) before a sure loss, then the best central TTFT change; None when L1 alone is on
    the plateau or no tier is priced."""
    if plateau.none_pays:
        priced = [r for r in rows if r.get("ttft_change_pct") is not None]
        return min(priced, key=lambda r: (r.get("answer") == "loss", r["ttft_change_pct"])) if priced else None
    return next((r for r in rows if r[key] == plateau.plateau_l2_tokens), None)
