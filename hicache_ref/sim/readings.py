"""The seed's readings as the model computes them: reading by reading, the seed's value, the
model's, the tolerance and whether it is within.

Each quantity is computed from the profile's mechanisms in the reading's state: the cold first
request analytically (chunked backups of one prompt), the workload ones from the scenario's
replays (hicache_ref.sim.scenario). Tolerances: times within 15%, percentages and hit rates
within 3 points, counts exactly, and every sign right (a loss stays a loss).
"""

from __future__ import annotations

import functools

import numpy as np

from hal.transfer.direction import Direction
from hal.transfer.layout_registry import get_layout
from hal.transfer.plan import plan_pool_transfer
from hal.transfer.seed import SEED_GEOMETRY, seed_plan
from hicache_ref.sim import cost, spread
from hicache_ref.sim import mechanisms as mech
from hicache_ref.sim.prefill_model import require_compute
from hicache_ref.sim.scenario import host_state
from hicache_ref.sim.seed_scenario import l2_tokens, seed_host_state

RELATIVE_TOLERANCE = 0.15  # time readings
POINTS_TOLERANCE = 3.0  # percentages and hit rates
ANSWER_READING = "ttft_all_fixes"  # the reading that answers "does HiCache pay off": every fix vs HiCache off
ROW_KEYS = ("reading", "seed", "model", "unit", "tolerance", "within", "state", "interpretation")
PLATEAU_TIERS = 8


def chunk_traffic(layout: str, chunk: int) -> mech.Traffic:
    """One chunk's D2H backup of fresh contiguous pages in `layout`, as the seed's copy ops move it."""
    return _chunk_traffic(get_layout(layout), chunk)


@functools.lru_cache(maxsize=256)
def _chunk_traffic(host_layout, chunk: int) -> mech.Traffic:
    # keyed by the layout object, not its name: a layout registered again under a name plans anew.
    # A fit prices the same few chunks thousands of times; the plan never depends on the profile.
    layout, g = host_layout.name, SEED_GEOMETRY
    if host_layout.native_io_backend == "kernel":  # one all-layer kernel launch; an item per token and layer
        return mech.Traffic(bytes=chunk * g.token_bytes, launches=1, items=chunk * g.layers, kernel=True)
    idx = np.arange(chunk, dtype=np.int64)
    plan = plan_pool_transfer(layout, g, chunk, idx, idx, Direction.D2H)
    return mech.Traffic(bytes=plan.nbytes, segments=plan.num_segments, launches=1)


def first_request(profile, state: dict, scenario: dict, tokens: int | None = None) -> float:
    """TTFT of the first prompt a fresh server sees: its prefill and each chunk's backup."""
    n = tokens or scenario["first_request_tokens"]
    compute = require_compute(profile).prefill_seconds(n)
    if not state["hicache"]:
        return compute
    chunk = scenario["chunk_tokens"]
    chunks = -(-n // chunk)
    one = chunk_traffic(state["host_layout"], chunk)
    d2h = mech.Traffic(one.bytes * chunks, one.segments * chunks, one.launches * chunks, one.items * chunks, one.kernel)
    hs = seed_host_state(state, scenario, scenario["l2_gb_per_card"], profile)
    return mech.service(profile, compute, 0, mech.Traffic(), d2h, hs).total


def workload_busy(profile, runs, state: dict, l2_gb: float) -> tuple[float, dict]:
    """(busy seconds of the prefill server over the scenario's trace in `state`, its replay figures)."""
    fig = runs.figures(state, l2_tokens(l2_gb))
    hs = host_state(state, profile, l2_tokens(l2_gb), SEED_GEOMETRY.token_bytes, runs.tp)
    return cost.run_service(profile, fig, hs).total, fig


def workload_ttft(profile, runs, state: dict, l2_gb: float) -> tuple[float, dict]:
    """(mean TTFT of the scenario's trace in `state`, its replay figures)."""
    busy, fig = workload_busy(profile, runs, state, l2_gb)
    return mech.mean_ttft_seconds(busy, fig["requests"], runs.base.serving.concurrency), fig


def workload_change_pct(profile, runs, state: dict, l2_gb: float, states: dict) -> float:
    """TTFT change (%) of `state` against HiCache off priced as every command prices it (cost.off_price)."""
    on, _ = workload_ttft(profile, runs, state, l2_gb)
    off = cost.off_price(profile, runs.figures(states["hicache_off"], l2_tokens(l2_gb)))["modeled_ttft_seconds"]
    return (on / off - 1) * 100


def plateau_change(profile, runs, state: dict, l2_gb: float, states: dict) -> float:
    """TTFT change (%) of the smallest L2 whose hit rate is within 1 point of the full L2's, against
    the full L2 (L2 swept in PLATEAU_TIERS tiers up to `l2_gb` per card); NaN when only the full L2 is."""
    tiers = [l2_gb * i / PLATEAU_TIERS for i in range(1, PLATEAU_TIERS + 1)]
    rates = [runs.figures(state, l2_tokens(gb))["hit_rate"] for gb in tiers]
    i = next(i for i, r in enumerate(rates) if rates[-1] - r <= 0.01)
    if i == len(tiers) - 1:
        return float("nan")
    at, full = workload_ttft(profile, runs, state, tiers[i])[0], workload_ttft(profile, runs, state, tiers[-1])[0]
    return (at / full - 1) * 100


WORKLOAD_QUANTITIES = ("workload_ttft_change", "workload_hit_rate", "plateau_ttft_change")  # priced on replays


def replay_pairs(readings, names=None) -> list[tuple[dict, int]]:
    """(state, L2 tokens per card) of every replay `model_value` asks the runs for, over the
    readings `names` (None: all): what to hand Runs.prefetch before the readings are priced."""
    sc, out = readings.scenario, []
    for r in readings.readings:
        if (names is not None and r.name not in names) or r.quantity not in WORKLOAD_QUANTITIES:
            continue
        st, gb = readings.states[r.state], r.l2_gb_per_card or sc["l2_gb_per_card"]
        if r.quantity == "workload_ttft_change":
            out.append((readings.states["hicache_off"], l2_tokens(gb)))
        if r.quantity == "plateau_ttft_change":
            out += [(st, l2_tokens(gb * i / PLATEAU_TIERS)) for i in range(1, PLATEAU_TIERS)]
        out.append((st, l2_tokens(gb)))
    return out


def model_value(profile, reading, readings, runs) -> float:
    """The model's figure for `reading` (hardware_profiles.readings.Reading) on `profile`."""
    q, sc = reading.quantity, readings.scenario
    st = readings.states.get(reading.state) if reading.state else None
    gb = reading.l2_gb_per_card or sc["l2_gb_per_card"]
    g = SEED_GEOMETRY
    if q == "first_request_ttft":
        return first_request(profile, st, sc)
    if q == "d2h_submission":
        return mech.submission_seconds(profile, chunk_traffic(st["host_layout"], sc["chunk_tokens"]))
    if q == "nonhit_ttft_change":
        return (first_request(profile, st, sc) / first_request(profile, readings.states["hicache_off"], sc) - 1) * 100
    if q == "workload_ttft_change":
        return workload_change_pct(profile, runs, st, gb, readings.states)
    if q == "workload_hit_rate":
        return runs.figures(st, l2_tokens(gb))["hit_rate"] * 100
    if q == "plateau_ttft_change":
        return float(np.sign(plateau_change(profile, runs, st, gb, readings.states)))
    hs = seed_host_state(st, sc, gb, profile) if st else mech.HostState()
    if q in ("allhit_intercept", "allhit_slope"):
        pts = [(n, cost.allhit_seconds(profile, n, g.layers, g.token_bytes, hs)) for n in cost.ALLHIT_TOKENS]
        fit = cost.fit_line([n for n, _ in pts], [s for _, s in pts])
        return fit.a * 1e3 if q == "allhit_intercept" else fit.b * 1e6
    if q == "deployment_floor":
        return require_compute(profile).prefill_fixed_s * 1e3
    if q == "h2d_gbps":
        return mech.dma_gbps(profile, "h2d", hs)
    if q == "break_even_tokens":
        n = cost.break_even_tokens(profile, g.layers, g.token_bytes)
        return float("nan") if n is None else n
    if q == "seed_segments":
        return float(seed_plan(reading.host_layout).num_segments)
    if q == "ghost_entry_bytes":
        from hicache_ref.core.ghost import measure_bytes_per_entry

        return float(measure_bytes_per_entry(20_000))
    raise ValueError(f"reading {reading.name}: no model for quantity {q!r}")


def tolerance(reading) -> tuple[str, float]:
    """(kind, size): relative for times, points for percentages, exact for counts, sign for signs."""
    if reading.unit == "sign":
        return "sign", 0.0
    if reading.unit in ("%",):
        return "points", POINTS_TOLERANCE
    if reading.unit in ("segments",):
        return "exact", 0.0
    return "relative", RELATIVE_TOLERANCE


def within(reading, model: float) -> bool:
    if model is None or not np.isfinite(model):
        return False
    kind, tol = tolerance(reading)
    seed = reading.value
    if kind == "sign":
        return np.sign(model) == np.sign(seed)
    if np.sign(model) != np.sign(seed) and seed != 0 and kind != "exact":
        return False  # a loss stays a loss, a gain a gain
    if kind == "points":
        return abs(model - seed) <= tol
    if kind == "exact":
        return model == seed
    return abs(model - seed) <= tol * abs(seed)


NO_VALUE = {"plateau_ttft_change": "no L2 tier below the full one comes within 1 point of its hit rate: on this "
                                   "trace the hit rate still rises up to the full L2",
            "break_even_tokens": "loading the cached KV never beats recomputing it under this profile"}


def detail(reading, model: float) -> str:
    """Why a row is within or not, in words: the model's value against the seed's and the tolerance."""
    if model is None or not np.isfinite(model):
        return NO_VALUE.get(reading.quantity, "the model gives no value")
    kind, tol = tolerance(reading)
    seed, unit = reading.value, reading.unit
    if kind == "sign":
        return f"model sign {model:+.0f}, seed sign {seed:+.0f}"
    if np.sign(model) != np.sign(seed) and seed != 0 and kind != "exact":
        return f"model {model:.4g} {unit} has the opposite sign of the seed's {seed:.4g} {unit}"
    off = model - seed
    if kind == "points":
        return f"model {model:.4g} {unit} vs seed {seed:.4g} {unit}: {off:+.2f} points (tolerance {tol:g})"
    if kind == "exact":
        return f"model {model:.6g} vs seed {seed:.6g} {unit}" + ("" if off == 0 else f": {off:+.6g}")
    return f"model {model:.4g} {unit} vs seed {seed:.4g} {unit}: {off / seed * 100:+.1f}% (tolerance {tol * 100:g}%)"


def workload_spread(profile, runs, reading, readings, ensemble) -> dict:
    """A workload TTFT reading's answer and intervals (hicache_ref.sim.spread): its state against
    HiCache off, the same replays priced per member of `ensemble`."""
    gb = reading.l2_gb_per_card or readings.scenario["l2_gb_per_card"]
    on, off = readings.states[reading.state], readings.states["hicache_off"]

    def price(m):
        busy, fig = workload_busy(m, runs, on, gb)
        base, fig_off = workload_busy(m, runs, off, gb)
        conc = runs.base.serving.concurrency
        ttft, ttft_off = (mech.mean_ttft_seconds(b, f["requests"], conc) for b, f in ((busy, fig), (base, fig_off)))
        return busy, base, (ttft / ttft_off - 1) * 100

    return spread.spread(ensemble, price)


def evaluate(profile, readings, runs, ensemble=None) -> list[dict]:
    """One row per reading (ROW_KEYS and `derives`, `quantity`, `measured`, `detail`, `not_measured`);
    a workload TTFT reading adds its answer and intervals over `ensemble` (default: the profile's)."""
    ensemble = spread.members(profile) if ensemble is None else ensemble
    rows = []
    for r in readings.readings:
        kind, tol = tolerance(r)
        row = dict(reading=r.name, seed=r.value, unit=r.unit, tolerance={"kind": kind, "size": tol}, state=r.state,
                   interpretation=r.interpretation, measured=r.measured, quantity=r.quantity,
                   derives=list(r.derives), l2_gb_per_card=r.l2_gb_per_card)
        try:
            m = model_value(profile, r, readings, runs)
            row.update(model=m if np.isfinite(m) else None, within=bool(within(r, m)), not_measured=None,
                       detail=detail(r, m))
            if r.quantity == "workload_ttft_change":  # what the fixes net over HiCache off, in server seconds
                gb = r.l2_gb_per_card or readings.scenario["l2_gb_per_card"]
                row["net_seconds"] = (workload_busy(profile, runs, readings.states["hicache_off"], gb)[0]
                                      - workload_busy(profile, runs, readings.states[r.state], gb)[0])
                row.update(workload_spread(profile, runs, r, readings, ensemble))
        except mech.Unpriced as e:
            row.update(model=None, within=None, not_measured=str(e), detail=f"not measured: {e}")
        rows.append(row)
    return rows
