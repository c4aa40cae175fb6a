"""Net benefit: is tiered caching a gain on this machine, and by how much.

Arithmetic over a replay's figures and the profile's mechanisms (hicache_ref.sim.price.mechanisms): the
all-hit request and its fit, break-even, and net benefit against HiCache off (L1 alone,
hicache_ref.sim.run.baseline) with its assumed inputs named. No device, no bytes, deterministic. The model in words: docs/model.md.
"""

from __future__ import annotations

import dataclasses
import math
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from hicache_ref.sim.price import mechanisms as mech
from hicache_ref.sim.price import spread
from hicache_ref.sim.price.prefill_model import (
    FIRST_PRINCIPLES_KEYS,
    compute_of,
    prefill_from_moments,
    require_compute,
)


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


ALL_FIXED = mech.HostState()  # every host fix on: daemon threads, THP, NUMA-local memory, IDO


def allhit_seconds(profile, tokens: int, layers: int, token_bytes: int, state: mech.HostState = ALL_FIXED) -> float:
    """Modeled time of a request whose whole prompt of `tokens` is loaded from L2: prefill's fixed
    part, the L2 path, and the H2D of its KV as layer_first kernel loads (one launch per layer,
    one item per token and layer). Unpriced when the profile lacks a parameter."""
    c = compute_of(profile) or profile.compute  # first principles may give the fixed part
    fixed = mech.need(c.prefill_fixed_s, "compute.prefill_fixed_s", profile)
    path = mech.need(c.l2_path_fixed_s, "compute.l2_path_fixed_s", profile)
    h2d = mech.Traffic(bytes=tokens * token_bytes, launches=layers, items=tokens * layers, kernel=True)
    return fixed + path + mech.submission_seconds(profile, h2d) + mech.device_seconds(profile, "h2d", h2d, state)


def allhit_points(profile, layers: int, token_bytes: int, tokens=ALLHIT_TOKENS) -> list[tuple[int, float]]:
    return [(int(n), allhit_seconds(profile, int(n), layers, token_bytes)) for n in tokens]


def allhit_fit(profile, layers: int, token_bytes: int, tokens=ALLHIT_TOKENS) -> LineFit:
    pts = allhit_points(profile, layers, token_bytes, tokens)
    return fit_line([n for n, _ in pts], [s for _, s in pts])


def break_even_tokens(profile, layers: int, token_bytes: int, max_tokens: int = 10_000_000) -> float | None:
    """Prompt length above which loading the prompt's KV from L2 beats recomputing it, to half a
    token; None when loading never wins below max_tokens. Unpriced without a compute model."""
    c = require_compute(profile)

    def gap(n: float) -> float:  # > 0 while loading still costs more
        k = int(round(n))
        return allhit_seconds(profile, k, layers, token_bytes) - c.prefill_seconds(k)

    lo, hi = 1.0, float(max_tokens)
    if gap(hi) > 0:
        return None
    if gap(lo) <= 0:
        return 0.0
    while hi - lo > 0.5:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return hi


# The profile keys each mechanism reads (for naming the assumed ones).
COMPUTE_KEYS = ("compute.prefill_fixed_s", "compute.prefill_per_token_s", "compute.prefill_per_token_pair_s",
                "compute.prefill_curve", "compute.l2_path_fixed_s", *FIRST_PRINCIPLES_KEYS)
TRANSFER_KEYS = ("device.host_link_gbps", "link.h2d_gbps", "link.d2h_gbps", "link.per_segment_us", "link.per_launch_us",
                 "link.kernel_per_item_us")
HOST_KEYS = tuple(f"host_costs.{k}" for k in ("submit_contention", "d2h_interference",
                                              "translation_slowdown_per_mentry", "registered_slowdown_per_gb",
                                              "numa_remote_bw_factor",
                                              "ido_shared_d2h_factor"))


def assumed_inputs(profile, keys=(*COMPUTE_KEYS, *TRANSFER_KEYS, *HOST_KEYS)) -> tuple[str, ...]:
    """Those of `keys` whose value the profile marks `assumed:` (sorted, each once)."""
    assumed = profile.assumptions()
    return tuple(sorted(k for k in set(keys) if k in assumed))


def traffic(fig: dict, direction: str) -> mech.Traffic:
    """One direction's traffic as a replay's figures count it."""
    layers = fig["geometry"]["layers"]
    return mech.Traffic(bytes=fig[f"{direction}_bytes"], segments=fig[f"{direction}_segments"],
                        launches=fig[f"{direction}_launches"], items=fig[f"{direction}_tokens"] * layers,
                        kernel=fig.get("io_backend") == "kernel")


def prefill_seconds(profile, fig: dict, which: str = "compute") -> float:
    """A replay's prefill seconds under `profile`'s compute model: as cached ("compute"), with L1
    hits only ("l1_only") or with no cache ("no_cache"). Unpriced without a compute model."""
    c = require_compute(profile)
    if c.prefill_curve:  # not linear in the prompt moments: the replay's own tally
        return fig[{"compute": "modeled_prefill_compute_seconds", "l1_only": "modeled_prefill_l1_only_seconds",
                    "no_cache": "baseline_prefill_seconds"}[which]]
    return prefill_from_moments(c, fig["prefill_moments"][which])


L3_KEYS = tuple(f"l3_link.{k}" for k in ("read_gbps", "write_gbps", "per_batch_us", "per_object_us", "uplink_gbps"))


def l3_link_figures(profile, fig: dict, state: mech.HostState) -> dict:
    """An L3 run's link seconds by the profile's l3_link (reads, writes, the uplink shared with D2H
    write-back) and what they cost the server; {} without an L3. Unpriced when a key is unknown."""
    if not fig.get("l3"):
        return {}
    read = mech.l3_seconds(profile, "read", fig["l3_pages_read"], fig["l3_bytes_read"], fig["l3_prefetches"])
    write = mech.l3_seconds(profile, "write", fig["l3_pages_written"], fig["l3_bytes_written"],
                            fig.get("l3_write_batches", 0))
    shared = mech.shared_uplink_seconds(profile, fig["d2h_bytes"], fig["l3_bytes_read"] + fig["l3_bytes_written"],
                                        read + write, state)
    return dict(l3_link_read_seconds=read, l3_link_write_seconds=write, l3_shared_uplink_seconds=shared,
                l3_service_seconds=mech.l3_service(profile, fig["l3_modeled_stall_seconds"], shared))


def run_service(profile, fig: dict, state: mech.HostState) -> mech.Service:
    """The prefill server's busy seconds for a replay's figures under `state` (Unpriced if unknown)."""
    l3 = l3_link_figures(profile, fig, state).get("l3_service_seconds", 0.0)
    return mech.service(profile, prefill_seconds(profile, fig), fig["l2_hit_requests"],
                        traffic(fig, "h2d"), traffic(fig, "d2h"), state, l3_s=l3)


def replay_state(registered_bytes: int) -> mech.HostState:
    """The host state a replay is priced in: every host fix on, its host pool registered (one rank,
    no TP group; replay_host_state adds the group)."""
    return mech.HostState(registered_bytes=int(registered_bytes))


def clock_in_replay_state(backend, cache):
    """While a replay runs on `cache`: `backend`'s modeled clock (where it has one) prices each plan in
    the replay's host state (`replay_state`), so its modeled seconds are the net benefit's terms;
    the backend's own factors come back after."""
    return clock_in_state(backend, cache.host.nbytes if cache.host is not None else 0)


@contextmanager
def clock_in_state(backend, registered_bytes: int):
    """clock_in_replay_state for a host pool of `registered_bytes` (an engine whose pool is not the
    reference's cache)."""
    setter = getattr(backend, "set_host_factors", None)
    profile = getattr(backend, "profile", None)
    if setter is None or profile is None:
        yield
        return
    before = backend.host_factors
    try:
        setter(mech.bandwidth_factors(profile, replay_state(registered_bytes)))
    except mech.Unpriced:  # no host cost to price with: the link's own rate (and no net benefit either)
        pass
    try:
        yield
    finally:
        setter(before)


REPLAY_STATE_NOTE = ("priced with every host fix on (daemon-thread submission, THP, NUMA-local memory, IDO; a pool "
                     "the TP group shares interleaved over the NUMA nodes, as hicache ablate's rung): hicache ablate "
                     "prices the states before them")
OFF_REASON = "HiCache off: the same trace and spec through L1 alone (hicache_ref.sim.run.baseline)"


def replay_host_state(profile, fig: dict) -> mech.HostState:
    """The host side a replay's net benefit is priced with: replay_state, and the TP group as its spec
    says (hicache_ref.sim.ladder.scenario.host_state of the ladder's last host fix, for this run's pool)."""
    tp_node = fig.get("spec", {}).get("tp") or {}
    tp, shared = tp_node.get("ranks") or 1, bool(tp_node.get("shared_host"))
    per_switch = (profile.topology.devices_per_switch if profile.topology else None) or 1
    return dataclasses.replace(replay_state(fig.get("registered_bytes", 0)), numa="interleave" if shared else "local",
                               writers_per_uplink=1 if shared else min(per_switch, tp),
                               numa_nodes=profile.host.numa_nodes or 1)


def off_price(profile, off: dict) -> dict:
    """HiCache off priced (`off`: the figures of hicache_ref.sim.run.baseline.off_spec's replay): nothing
    registered, nothing moved; its hit rate, busy seconds and mean TTFT. Unpriced when it cannot be."""
    svc = run_service(profile, off, mech.HostState())
    return dict(hit_rate=off["hit_rate"], busy_seconds=svc.total, prefill_seconds=svc.compute,
                modeled_ttft_seconds=mech.mean_ttft_seconds(svc.total, off["requests"], off.get("concurrency")))


def against_off(svc: mech.Service, fig: dict, off: dict) -> dict:
    """A run's busy seconds `svc` against HiCache off (`off`: off_price's dict): net benefit (off's busy
    seconds minus the run's), the compute it saved and the transfers it paid, the mean TTFT of both
    under the run's concurrency and the change."""
    ttft, ttft_off = mech.mean_ttft_seconds(svc.total, fig["requests"], fig.get("concurrency")), off["modeled_ttft_seconds"]
    return dict(net_benefit_seconds=off["busy_seconds"] - svc.total,
                net_benefit_compute_saved_seconds=off["prefill_seconds"] - svc.compute,
                net_benefit_transfer_seconds=svc.total - svc.compute, modeled_ttft_seconds=ttft,
                modeled_ttft_l1_only_seconds=ttft_off, ttft_change_seconds=ttft - ttft_off,
                modeled_ttft_change_pct=(ttft / ttft_off - 1) * 100 if ttft_off else None)


def replay_figures(profile, fig: dict, off: dict | None, ensemble=None) -> dict:
    """The net-benefit keys of a replay's JSON against HiCache off (`off`: the figures of its replay,
    hicache_ref.sim.run.baseline): net benefit, TTFT of both and the change (against_off), HiCache off's
    own figures (`hicache_off`) and the assumed inputs; net_benefit_seconds None with
    net_benefit_reason when the profile cannot say, nothing was replayed, or no off run is given
    (the caller prices the run itself). With them the answer and the intervals over `ensemble`
    (default: the profile's, hicache_ref.sim.price.spread), the same figures re-priced."""
    if not fig["requests"]:
        return {**spread.unpriced(), "net_benefit_seconds": None,
                "net_benefit_reason": "no request replayed: no prefill to save and nothing moved"}
    if profile is None:
        return {**spread.unpriced(), "net_benefit_seconds": None, "net_benefit_reason": "no profile"}
    if off is None:
        return {**spread.unpriced(), "net_benefit_seconds": None,
                "net_benefit_reason": "not priced here: its caller prices it against the HiCache-off run it shares"}
    state = replay_host_state(profile, fig)
    try:
        svc = run_service(profile, fig, state)
        base = off_price(profile, off)
        priced = spread.spread(spread.members(profile) if ensemble is None else ensemble,
                               lambda m: replay_busy(m, fig, state, off))
    except mech.Unpriced as e:
        return {**spread.unpriced(), "net_benefit_seconds": None, "net_benefit_reason": str(e)}
    l3 = l3_link_figures(profile, fig, state)
    keys = (*COMPUTE_KEYS, *TRANSFER_KEYS, *HOST_KEYS, *(L3_KEYS if l3 else ()))
    return {**l3, **against_off(svc, fig, base), "hicache_off": base, "net_benefit_service": svc.to_json(),
            "net_benefit_host_state": state.to_json(), "net_benefit_assumed_inputs": list(assumed_inputs(profile, keys)),
            "net_benefit_reason": "busy seconds of HiCache off - this run's (compute saved - L2 path, loads, "
                                  "backup hold and interference); " + OFF_REASON + "; " + REPLAY_STATE_NOTE, **priced}


def replay_busy(profile, fig: dict, state: mech.HostState, off: dict) -> tuple[float, float, float | None]:
    """(busy seconds of the run, of HiCache off (`off`: its replay's figures), TTFT change in %) under
    `profile`: what `spread.spread` re-prices per ensemble member."""
    busy, base = run_service(profile, fig, state).total, off_price(profile, off)
    ttft = mech.mean_ttft_seconds(busy, fig["requests"], fig.get("concurrency"))
    ttft_base = base["modeled_ttft_seconds"]
    return busy, base["busy_seconds"], (ttft / ttft_base - 1) * 100 if ttft_base else None
