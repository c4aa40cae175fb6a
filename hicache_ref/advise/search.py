"""The search, in the seed's order: layout x io backend, L2 capacity tier by tier to the plateau,
write policy, one host copy per TP group, L3; then the layout pairs again at the chosen capacity.

Each step keeps what the step before chose and tries its own values; host fixes are priced on the
winner (they change no hit). Capacity comes from the one-pass stack-distance curve
(hicache_ref.sim.trace.stack_distance): it says where the hit rate stops rising, and only the tiers
around that point are replayed to price them.
"""

from __future__ import annotations

from hicache_ref.advise.candidate_pricing import Priced, Pricer, unpriced
from hicache_ref.advise.replays import Replays
from hicache_ref.advise.space import Candidate, layout_io_pairs, write_policies
from hicache_ref.sim.ladder.scenario import host_state, state
from hicache_ref.sim.price import cost
from hicache_ref.sim.price import mechanisms as mech
from hicache_ref.spec import CacheSpec

DEFAULT_RATIO = 2.0  # SGLang 0.5.23's --hicache-ratio default: where the layout step runs


def candidate_spec(base: CacheSpec, c: Candidate, tp: int) -> CacheSpec:
    """The spec one rank replays for `c` (a TP-shared pool is the group's whole pool)."""
    l3 = dict(l3="model:", l3_tokens=None) if c.l3 else {}
    return base.replace(l2_tokens=c.l2_per_rank * (tp if c.tp_shared else 1), host_layout=c.layout,
                        io_backend=c.io_backend, write_policy=c.write_policy, tp=None, shared_host=False, **l3)


def fixed_state(c: Candidate) -> dict:
    """Every host fix on: daemon-thread submission, THP, NUMA-local (a shared pool interleaved), IDO."""
    return state(submission="daemon", host_pages="thp", numa="interleave" if c.tp_shared else "local", ido=True,
                 tp_shared=c.tp_shared)


HOST_RUNGS = (("first build", dict()), ("daemon threads", dict(submission="daemon")),
              ("THP before registration", dict(host_pages="thp")),
              ("NUMA placement, IDO", dict(numa="local", ido=True)))  # a shared pool: interleaved (fixed_state)


class Search:
    """One profile's search over one base spec (finite L1, no TP fields) and trace."""

    def __init__(self, base: CacheSpec, profile, tp: int, replays: Replays, off: dict):
        self.base, self.profile, self.tp, self.replays = base, profile, tp, replays
        self.pricer = Pricer(profile, off)
        self.tried: dict[Candidate, tuple[dict, Priced]] = {}
        self.token_bytes = base.geometry.token_bytes

    def state_of(self, c: Candidate, st: dict | None = None) -> mech.HostState:
        return host_state(st or fixed_state(c), self.profile, c.l2_per_rank, self.token_bytes, self.tp)

    def price(self, c: Candidate) -> Priced:
        if c not in self.tried:
            fig = self.replays.figures(candidate_spec(self.base, c, self.tp))
            self.tried[c] = (fig, self.pricer.price(fig, self.state_of(c)))
        return self.tried[c][1]

    def best(self, cands) -> Candidate:
        return min(cands, key=lambda c: (self.price(c).key, cands.index(c)))

    def run(self, tiers: list[tuple[float, int]], curve_rates: list[float], plateau_gain: float,
            attention: str, with_l3: bool) -> list[dict]:
        """The steps, each its tried candidates and the one it keeps (the ladder on this trace)."""
        ladder = []

        def step(name: str, change: str, cands: list[Candidate]) -> Candidate:
            pick = self.best(cands)
            ladder.append(dict(step=name, change=change, tried=[c.to_json() for c in cands],
                               kept=pick.to_json(), **self.price(pick).to_json()))
            return pick

        start = next((t for t in tiers if t[0] == DEFAULT_RATIO), tiers[0])
        pairs = layout_io_pairs(attention)
        first = [Candidate(lay, io, write_policies()[0], start[0], start[1]) for lay, io in pairs]
        cur = step("layout_io", "host layout x io backend, as SGLang 0.5.23 resolves them", first)
        rising = [i for i in range(len(tiers)) if i == 0 or curve_rates[i] > curve_rates[i - 1]]
        top = max(curve_rates)
        knee = next(i for i, h in enumerate(curve_rates) if h >= top - plateau_gain)
        cur = step("l2_capacity", f"L2 tier by tier where the one-pass curve rises (within {plateau_gain} of its top "
                   f"from {tiers[knee][1]:,} tokens), then on while the TTFT keeps falling",
                   self.capacity(cur, tiers, rising))
        policy = cur.write_policy
        cur = step("write_policy", "L1 -> L2 write policy", [cur.but(write_policy=p) for p in write_policies()])
        if cur.write_policy != policy:  # another policy backs up other pages: its best capacity may differ
            cur = step("l2_capacity_again", f"L2 tier by tier under {cur.write_policy}", self.capacity(cur, tiers, rising))
        if attention == "mla" and self.tp > 1:
            cur = step("tp_shared", f"one host copy for the TP group of {self.tp} (MLA's latent is the same on "
                       "every rank)", [cur, cur.but(tp_shared=True)])
        if with_l3:
            cur = step("l3", "an L3 pooled from decode nodes' host DRAM (Mooncake)", [cur, cur.but(l3=True)])
        step("layout_io_again", "host layout x io backend at the chosen capacity and policy",
             [cur.but(layout=lay, io_backend=io) for lay, io in pairs])
        return ladder

    def capacity(self, cur: Candidate, tiers: list[tuple[float, int]], rising: list[int]) -> list[Candidate]:
        """`cur` at the tiers `rising` names (the first, and each where the curve's hit rate rose: an
        equal hit rate on more memory only costs more), then at each next tier while it prices lower
        than the one before."""
        cands = [cur.but(ratio=tiers[i][0], l2_per_rank=tiers[i][1]) for i in rising]
        for r, t in tiers[rising[-1] + 1:]:
            nxt = cur.but(ratio=r, l2_per_rank=t)
            cands.append(nxt)
            if self.price(nxt).key >= self.price(cands[-2]).key:
                break
        return cands

    def host_ladder(self, c: Candidate) -> list[dict]:
        """`c` priced under the host fixes, each on top of the previous (they change no hit)."""
        fig = self.tried[c][0]
        rows, switches = [], {}
        for i, (name, more) in enumerate(HOST_RUNGS):
            switches.update(more)
            st = fixed_state(c) if i == len(HOST_RUNGS) - 1 else state(**switches, tp_shared=c.tp_shared)
            try:
                p = self.pricer.price(fig, self.state_of(c, st))
            except mech.Unpriced as e:
                p = unpriced(str(e))
            rows.append(dict(step=name, state=st, **p.to_json()))
        return rows


def l3_priced(profile) -> str | None:
    """Why the profile cannot price an L3, or None."""
    m = getattr(profile, "l3_link", None)
    for key in cost.L3_KEYS:
        if m is None or getattr(m, key.split(".", 1)[1], None) is None:
            return f"profile {profile.name} has no {key}"
    return None
