"""The cost model: is tiered caching a net benefit on this machine, and by how much.

Pure arithmetic over the profile: prefill compute, the all-hit fit and break-even, the penalties
the link model does not show, and net benefit over an L1-only cache with its assumed inputs named.
No device, no bytes, deterministic. The model in words: docs/model.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

GB = 1e9  # the seed's registered sizes are decimal GB
SEED_REGISTERED_GB = (15, 80)  # the registered sizes the seed's penalty figures come from


@dataclass(frozen=True)
class LineFit:
    """y = a + b*x by least squares over the points, with what is left over."""

    a: float
    b: float
    residuals: tuple[float, ...]  # y - (a + b*x), point by point
    r2: float  # 1 - SS_res / SS_tot (1.0 when every y is equal and fitted exactly)
    xs: tuple[float, ...]
    ys: tuple[float, ...]

    @property
    def rmse(self) -> float:
        return math.sqrt(sum(r * r for r in self.residuals) / len(self.residuals))

    def at(self, x: float) -> float:
        return self.a + self.b * x

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, "r2": self.r2, "rmse": self.rmse, "points": len(self.xs),
                "xs": list(self.xs), "ys": list(self.ys), "residuals": list(self.residuals)}


def fit_line(xs, ys) -> LineFit:
    """Ordinary least squares of y on x. ValueError naming the argument for fewer than two
    distinct x, mismatched lengths or non-finite values."""
    x = np.asarray(xs, dtype=np.float64).ravel()
    y = np.asarray(ys, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"ys: {y.size} values for {x.size} xs")
    if x.size < 2 or np.unique(x).size < 2:
        raise ValueError(f"xs: need at least two distinct x values, got {x.tolist()[:8]}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("xs, ys: every value must be finite")
    xm, ym = float(x.mean()), float(y.mean())
    dx = x - xm
    b = float((dx * (y - ym)).sum() / (dx * dx).sum())
    a = ym - b * xm
    res = y - (a + b * x)
    ss_tot = float(((y - ym) ** 2).sum())
    ss_res = float((res ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return LineFit(a, b, tuple(float(r) for r in res), r2, tuple(float(v) for v in x), tuple(float(v) for v in y))


# Prompt lengths the modeled all-hit points are taken at: the seed's range (1K..32K tokens).
ALLHIT_TOKENS = (1024, 2048, 4096, 8192, 16384, 32768)


def allhit_points(compute, tokens=ALLHIT_TOKENS) -> list[tuple[int, float]] | None:
    """(tokens, seconds) of the modeled all-hit request, or None when the profile has no all-hit model."""
    pts = [(int(n), compute.allhit_seconds(int(n))) for n in tokens]
    return None if any(s is None for _, s in pts) else pts


def allhit_fit(compute, tokens=ALLHIT_TOKENS) -> LineFit | None:
    pts = allhit_points(compute, tokens)
    return None if pts is None else fit_line([n for n, _ in pts], [s for _, s in pts])


@dataclass(frozen=True)
class AllhitSplit:
    """The all-hit intercept as the floor every request pays plus the L2 path's fixed cost."""

    floor_s: float
    l2_path_s: float


def split_allhit(fit_a: float, compute) -> AllhitSplit | None:
    """a = prefill's fixed cost (the shared deployment floor) + the L2 path; None when unknown."""
    if compute.prefill_fixed_s is None:
        return None
    return AllhitSplit(compute.prefill_fixed_s, fit_a - compute.prefill_fixed_s)


def break_even_tokens(fit_a: float, fit_b: float, compute, max_tokens: int = 10_000_000) -> float | None:
    """Prompt length above which loading the prompt's KV (a + b*n) beats recomputing it
    (prefill(n)); None when the compute model is unknown or loading never wins below max_tokens."""
    if not compute.known:
        return None
    if not compute.prefill_curve:
        slope = compute.prefill_per_token_s - fit_b
        if slope <= 0:
            return None
        n = (fit_a - compute.prefill_fixed_s) / slope
        return max(0.0, n) if n <= max_tokens else None

    def gap(n: float) -> float:  # > 0 while loading still costs more
        return fit_a + fit_b * n - compute.prefill_seconds(int(round(n)))

    lo, hi = 0.0, float(max_tokens)
    if gap(hi) > 0:
        return None
    if gap(1.0) <= 0:
        return 0.0
    lo = 1.0
    while hi - lo > 0.5:  # prefill_seconds takes whole tokens: half a token is the resolution
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return hi


def registered_penalty_gb(registered_bytes: int) -> float:
    """The registered size (decimal GB) the penalty is read at: `registered_bytes` held inside
    the seed's measured SEED_REGISTERED_GB. Outside it the line is not extrapolated: below 15 GB
    the 15 GB figure stands (an upper bound: the slowdown grows with the size registered), above
    80 GB the 80 GB figure (a lower bound). registered_penalty_held says when this happened."""
    lo, hi = SEED_REGISTERED_GB
    return min(max(registered_bytes / GB, float(lo)), float(hi))


def registered_penalty_held(registered_bytes: int) -> str | None:
    """None inside the measured range (or with nothing registered), else why the penalty is held."""
    lo, hi = SEED_REGISTERED_GB
    gb = registered_bytes / GB
    if registered_bytes == 0 or lo <= gb <= hi:
        return None
    end, bound = (lo, "the penalty at most this, the net benefit at least") if gb < lo else \
        (hi, "the penalty at least this, the net benefit at most")
    return (f"{gb:.1f} GB registered lies outside the {lo}-{hi} GB the registered-size penalty was measured "
            f"over: the {end} GB figure is held ({bound}), not extrapolated")


def registered_penalty_pct(penalties, registered_bytes: int) -> float | None:
    """Seed-workload slowdown (%) with `registered_bytes` of host memory registered, read at
    registered_penalty_gb (held inside the measured range); 0 with nothing registered."""
    if isinstance(registered_bytes, bool) or not isinstance(registered_bytes, int) or registered_bytes < 0:
        raise ValueError(f"registered_bytes: expected a non-negative integer, got {registered_bytes!r}")
    if registered_bytes == 0:  # no host pool registered (no L2): the seed's line does not apply
        return 0.0
    return penalties.registered_pct(registered_penalty_gb(registered_bytes))


def numa_penalty_pct(penalties, local: bool) -> float | None:
    return penalties.numa_pct(bool(local))


def d2h_gbps_shared(link, penalties, devices_per_switch: int | None, ido: str) -> float | None:
    """Per-card D2H bandwidth while the cards of one uplink back up at once: the link's figure,
    times the IDO factor when cards share the uplink and ordering is not known to be relaxed."""
    if link.d2h_gbps is None:
        return None
    if not devices_per_switch or devices_per_switch <= 1 or ido == "on":
        return link.d2h_gbps
    if penalties.ido_shared_d2h_factor is None:
        return None
    return link.d2h_gbps * penalties.ido_shared_d2h_factor


@dataclass(frozen=True)
class NetBenefit:
    """Seconds HiCache gains (positive) or loses over a workload against an L1-only prefix
    cache, and what the figure rests on. compute_saved_s: what the L2 hits save (see the module
    docstring)."""

    compute_saved_s: float
    transfer_s: float
    penalty_s: float
    penalty_pct: float
    assumed_inputs: tuple[str, ...] = field(default=())

    @property
    def net_s(self) -> float:
        return self.compute_saved_s - self.transfer_s - self.penalty_s

    def to_json(self) -> dict:
        return {"net_benefit_seconds": self.net_s, "compute_saved_seconds": self.compute_saved_s,
                "transfer_seconds": self.transfer_s, "penalty_seconds": self.penalty_s,
                "penalty_pct": self.penalty_pct, "assumed_inputs": list(self.assumed_inputs)}


# The profile keys each part of the net benefit reads (for naming the assumed ones).
COMPUTE_KEYS = ("compute.prefill_fixed_s", "compute.prefill_per_token_s", "compute.prefill_curve")
TRANSFER_KEYS = ("link.h2d_gbps", "link.d2h_gbps", "link.per_segment_us", "link.per_launch_us")
REGISTERED_KEYS = ("penalties.registered_base_pct", "penalties.registered_pct_per_gb")
NUMA_KEYS = ("penalties.numa_local_pct", "penalties.numa_remote_pct")
# Named among the assumed inputs when the registered size lies outside the seed's measured range.
REGISTERED_HELD_INPUT = (f"penalties.registered_pct_per_gb (held outside the measured "
                         f"{SEED_REGISTERED_GB[0]}-{SEED_REGISTERED_GB[1]} GB)")


def assumed_inputs(profile, keys) -> tuple[str, ...]:
    """Those of `keys` whose value the profile marks `assumed:` (sorted, each once)."""
    assumed = profile.assumptions()
    return tuple(sorted(k for k in set(keys) if k in assumed))


def net_benefit(profile, compute_saved_s: float, transfer_s: float, baseline_s: float,
                registered_bytes: int | None = None, numa_local: bool | None = None) -> NetBenefit:
    """compute saved - transfer seconds - (registered + NUMA slowdown) x the workload's baseline
    prefill seconds. A penalty whose input is not given (None) or not known is left out."""
    for name, v in (("compute_saved_s", compute_saved_s), ("transfer_s", transfer_s), ("baseline_s", baseline_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name}: expected a finite non-negative number of seconds, got {v!r}")
    keys = [*COMPUTE_KEYS, *TRANSFER_KEYS]
    pct = 0.0
    held = []
    if registered_bytes is not None:
        reg = registered_penalty_pct(profile.penalties, registered_bytes)
        if reg is not None:
            pct += reg
            keys += REGISTERED_KEYS
            if registered_penalty_held(registered_bytes):  # outside the measured range: an assumption
                held = [REGISTERED_HELD_INPUT]
    if numa_local is not None:
        numa = numa_penalty_pct(profile.penalties, numa_local)
        if numa is not None:
            pct += numa
            keys += NUMA_KEYS
    return NetBenefit(float(compute_saved_s), float(transfer_s), baseline_s * pct / 100.0, pct,
                      assumed_inputs(profile, keys) + tuple(held))


def replay_figures(profile, compute_saved_s: float | None, transfer_s: float | None, baseline_s: float | None,
                   registered_bytes: int, requests: int | None = None) -> dict:
    """The net-benefit keys of `hicache replay --json`: net_benefit_seconds (None with
    net_benefit_reason when the profile cannot say, or when `requests` is 0: a replay of no
    request has no figure), its parts, and the assumed inputs. compute_saved_s is what the L2
    hits save (see the module docstring). The registered-size penalty is taken at the host
    pool's bytes (all of it is registered; held inside the measured range); NUMA placement is
    not known to a replay, so its penalty is left out (and said so)."""
    if requests == 0:
        return {"net_benefit_seconds": None,
                "net_benefit_reason": "no request replayed: no prefill to save and nothing moved"}
    compute_known = profile is not None and profile.compute.known
    missing = [name for name, v in (("compute model (compute.prefill_*)", compute_saved_s if compute_known else None),
                                    ("complete link model (link.*)", transfer_s),
                                    ("compute model (compute.prefill_*)", baseline_s)) if v is None]
    if profile is None or missing:
        why = "no profile" if profile is None else f"profile {profile.name} has no {missing[0]}"
        return {"net_benefit_seconds": None, "net_benefit_reason": why}
    nb = net_benefit(profile, compute_saved_s, transfer_s, baseline_s, registered_bytes=registered_bytes)
    out = nb.to_json()
    reason = ("prefill compute the L2 hits save over an L1-only cache - modeled transfer seconds - registered-size "
              "penalty x baseline prefill seconds; NUMA penalty not applied (a replay places no memory)")
    held = registered_penalty_held(registered_bytes) if profile.penalties.registered_pct_per_gb is not None else None
    if held:
        reason += f"; {held} (bound L2 with --l2-tokens)"
    out["net_benefit_reason"] = reason
    out["baseline_prefill_seconds"] = baseline_s
    out["registered_bytes"] = registered_bytes
    out["registered_penalty_gb"] = registered_penalty_gb(registered_bytes) if registered_bytes else 0.0
    return {k if k.startswith("net_benefit") else f"net_benefit_{k}": v for k, v in out.items()}
