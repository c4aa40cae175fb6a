"""A candidate's figures against HiCache off, priced once per member of the profile's ensemble.

A replay's cache decisions do not depend on the profile, so each member re-prices the same two
replays (the candidate's and HiCache off on the same L1): TTFT change and net benefit per member,
member 0 the central value, the interval over all members holding it (hicache_ref.sim.price.uncertainty), and the
answer word from the interval of the TTFT change.
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_ref.sim.price import cost, spread
from hicache_ref.sim.price import mechanisms as mech
from hicache_ref.sim.price.uncertainty import answer, central_interval


@dataclass(frozen=True)
class Priced:
    """TTFT change (%) and net benefit (s) over HiCache off: central, interval, word; or why not."""

    ttft_change_pct: float | None
    ttft_interval: tuple[float, float] | None
    net_benefit_seconds: float | None
    net_interval: tuple[float, float] | None
    word: str | None
    service: dict | None
    unpriced: str | None = None

    @property
    def key(self) -> tuple:
        """Sort key: priced before unpriced, then the lower central TTFT change."""
        return (self.ttft_change_pct is None, self.ttft_change_pct if self.ttft_change_pct is not None else 0.0)

    def to_json(self) -> dict:
        return dict(ttft_change_pct=self.ttft_change_pct,
                    ttft_change_pct_interval=None if self.ttft_interval is None else list(self.ttft_interval),
                    net_benefit_seconds=self.net_benefit_seconds,
                    net_benefit_seconds_interval=None if self.net_interval is None else list(self.net_interval),
                    answer=self.word, service=self.service, unpriced=self.unpriced)


def unpriced(why: str) -> Priced:
    return Priced(None, None, None, None, None, None, why)


class Pricer:
    """Prices replays of one profile against one HiCache-off replay, across the ensemble."""

    def __init__(self, profile, off_fig: dict):
        self.profile, self.off = profile, off_fig
        self.members = spread.members(profile)  # member 0 the profile itself, checked
        self._off_total: list[float] | None = None
        self.off_why: str | None = None
        if not off_fig["requests"]:
            self.off_why = "no request replayed"
            return
        try:
            self._off_total = [cost.off_price(m, off_fig)["busy_seconds"] for m in self.members]
        except mech.Unpriced as e:
            self.off_why = str(e)

    def ttft(self, busy: float, fig: dict) -> float:
        return mech.mean_ttft_seconds(busy, fig["requests"], fig.get("concurrency"))

    def price(self, fig: dict, state: mech.HostState) -> Priced:
        """The candidate replay `fig` under host `state`, member by member."""
        if self._off_total is None:
            return unpriced(f"HiCache off is not priced: {self.off_why}")
        changes, nets, central = [], [], None
        try:
            for i, m in enumerate(self.members):
                svc = cost.run_service(m, fig, state)
                off = self._off_total[i]
                t, t_off = self.ttft(svc.total, fig), self.ttft(off, self.off)
                changes.append((t / t_off - 1) * 100 if t_off else 0.0)
                nets.append(off - svc.total)
                if i == 0:
                    central = svc.to_json()
        except mech.Unpriced as e:
            return unpriced(str(e))
        span = central_interval(changes)
        return Priced(changes[0], span, nets[0], central_interval(nets), answer(span), central)
