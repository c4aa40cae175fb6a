"""A modeled answer with its interval: one replay's figures priced once per member of the parameter
ensemble (hicache_ref.sim.price.uncertainty), the central value (member 0, the profile itself) and the
5-95% interval of busy seconds, net benefit and TTFT change, and the answer word.

The replay is not repeated: its cache decisions do not depend on the parameters, so `price` only
re-runs the mechanisms' arithmetic. Every command that prints a modeled figure (replay, sweep,
ablate, conform) reports these keys, spelled the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hicache_ref.sim.price import uncertainty

# The keys `spread` gives, in the order a JSON shows them.
KEYS = ("answer", "ttft_change_pct", "ttft_change_pct_interval", "busy_seconds", "busy_seconds_interval",
        "net_benefit_seconds_interval", "ensemble_members")
INTERVAL_NOTE = ("5-95% over the profile's parameter ensemble, widened to hold the central value "
                 "(hicache_ref.sim.price.uncertainty)")


def members(profile) -> tuple:
    """The ensemble a command prices with: member 0 the profile itself."""
    out = tuple(uncertainty.ensemble(profile))
    if not out or out[0] is not profile:
        raise ValueError(f"ensemble of profile {profile.name}: member 0 must be the profile itself")
    return out


def unpriced() -> dict:
    """The keys of a figure the profile cannot price (the reason is the figure's own)."""
    return dict.fromkeys(KEYS)


def spread(ensemble: Sequence, price: Callable) -> dict:
    """`price(member)` -> (busy seconds, busy seconds of the baseline, TTFT change in %) for each member
    of `ensemble`: member 0's values as the central ones, each figure's interval, the answer word
    (gain / loss / undecided from the TTFT change's interval). Unpriced from `price` propagates."""
    busy, net, change = [], [], []
    for m in ensemble:
        b, base, pct = price(m)
        busy.append(float(b))
        net.append(float(base) - float(b))
        change.append(None if pct is None else float(pct))
    if any(c is None for c in change):  # a baseline with no time to compare against
        ttft_iv, word = None, None
    else:
        ttft_iv = list(uncertainty.central_interval(change))
        word = uncertainty.answer(tuple(ttft_iv))
    return dict(answer=word, ttft_change_pct=change[0], ttft_change_pct_interval=ttft_iv, busy_seconds=busy[0],
                busy_seconds_interval=list(uncertainty.central_interval(busy)),
                net_benefit_seconds_interval=list(uncertainty.central_interval(net)), ensemble_members=len(ensemble))


def phrase(fig: dict, against: str) -> str:
    """One line: the answer word, the TTFT change with its interval, the net benefit's interval."""
    if fig.get("answer") is None:
        return "answer: not modeled"
    lo, hi = fig["ttft_change_pct_interval"]
    nlo, nhi = fig["net_benefit_seconds_interval"]
    n = fig["ensemble_members"]
    return (f"answer: {fig['answer']}: modeled TTFT {pct(fig['ttft_change_pct'])} [{pct(lo)}, {pct(hi)}] against "
            f"{against}, net benefit [{nlo:+.4g} s, {nhi:+.4g} s] (5-95% over {n} parameter set{'s' * (n != 1)})")


def pct(x: float) -> str:
    """A percentage with its sign, two decimals, or two significant digits when smaller than that."""
    return f"{x:+.2f}%" if x == 0 or abs(x) >= 0.01 else f"{x:+.2g}%"
