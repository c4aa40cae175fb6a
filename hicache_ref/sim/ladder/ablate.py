"""The seed's fix ladder over one trace: one rung per fix, each on top of the previous.

It shows what each of the seed's fixes is worth on a trace (`hicache ablate`). A rung is a state
(hicache_ref.sim.ladder.scenario): its cache side replayed, its host side priced by the mechanisms
(hicache_ref.sim.price.mechanisms) against HiCache off, the same trace on L1 alone. The same trace and
arguments give the same rows, bit for bit. The rungs (`STEPS`) and row fields: hicache_ref/README.md,
"Fix ladder".
"""

from __future__ import annotations

from collections.abc import Callable

from hardware_profiles import load_profile
from hicache_ref.sim.ladder.scenario import NotRunOnEngine, Runs, cache_spec, host_state, state
from hicache_ref.sim.price import cost, spread
from hicache_ref.sim.price import mechanisms as mech
from hicache_ref.sim.sweep.plateau import DEFAULT_PLATEAU_GAIN, find_plateau
from hicache_ref.sim.sweep.sweep_l3 import SELECTIVE, STARVED_L3_HIT_SHARE, TIGHT_L2_SHARE
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.spec import CacheSpec, SpecError
from hicache_ref.spec.capacity_check import check_capacity

STEPS = ("baseline", "layer_first", "daemon_threads", "thp", "numa", "tp_shared", "l3_pooled", "per_request_hits",
         "plateau_capacity")
L3_CHANGE = "no L3 -> L3 pooled from decode nodes' host DRAM (Mooncake; the model store, priced by l3_link)"
ROW_KEYS = ("step", "change", "hit_rate", "d2h_segments", "h2d_segments", "d2h_bytes", "h2d_bytes",
            "modeled_transfer_seconds", "ttft_change_seconds", "ttft_change_pct", "net_benefit_seconds",
            "assumed_inputs", "not_measured")
EXTRA_KEYS = ("notes", "l2_tokens", "host_layout", "state", "host_state", "service", "modeled_ttft_seconds",
              "d2h_bytes_all_ranks", "host_pool_bytes_all_ranks", "truncated_requests")
SWEEP_TIERS = 8
# Without --l1-tokens/--l2-tokens: L1 and L2 as these fractions of the trace's page-rounded tokens.
DEFAULT_L1_FRACTION, DEFAULT_L2_FRACTION = 16, 4


def _check(spec, requests, plateau_gain) -> None:
    if not isinstance(spec, CacheSpec):
        raise ValueError(f"spec: expected a CacheSpec, got {type(spec).__name__}")
    if spec.tiers.materialize:
        raise ValueError("--materialize: not supported by the ladder (it prices figures, not bytes)")
    if not isinstance(requests, list) or not all(isinstance(r, TraceRequest) for r in requests):
        raise ValueError("requests: expected a list of TraceRequest (hicache_ref.sim.trace.reader.read_trace)")
    if isinstance(plateau_gain, bool) or not isinstance(plateau_gain, (int, float)) or not 0 <= plateau_gain <= 1:
        raise ValueError(f"plateau_gain: expected a number in [0, 1], got {plateau_gain!r}")


def shared_l2(spec: CacheSpec, tp: int) -> CacheSpec:
    """The spec one rank replays when the TP group of `tp` shares one host pool: L2 = tp x per rank."""
    return spec.replace(l2_tokens=spec.tiers.l2_tokens // spec.page_size * spec.page_size * tp)


def _sized(spec: CacheSpec, requests, profile) -> tuple[CacheSpec, int]:
    """(spec with L1/L2 given or as trace fractions, TP ranks: given or the profile's devices per node);
    refused naming the option when the capacity sweep cannot fit its tiers or the machine its pools."""
    ps, t = spec.page_size, spec.tiers
    tp = spec.tp.ranks if spec.tp.ranks is not None else (profile.device.devices_per_node or 1)
    if t.l1_tokens is not None or t.l2_tokens is not None:  # the largest cache the ladder builds, before work
        check_capacity(spec.replace(tp=tp, shared_host=True))
    whole = sum(-(-r.input_length // ps) * ps for r in requests)
    l1 = t.l1_tokens if t.l1_tokens is not None else max(whole // DEFAULT_L1_FRACTION, ps)
    l2 = t.l2_tokens if t.l2_tokens is not None else max(whole // DEFAULT_L2_FRACTION, ps)
    if l2 < SWEEP_TIERS * tp * ps:
        raise SpecError("--l2-tokens", "tiers.l2_tokens", f"{l2:,} tokens is below the capacity sweep's "
                        f"{SWEEP_TIERS} tiers of {tp} ranks x --page-size {ps} ({SWEEP_TIERS * tp * ps:,})")
    spec = spec.replace(l1_tokens=l1, l2_tokens=l2, tp=None, shared_host=False)
    check_capacity(shared_l2(spec, tp))
    return spec, tp


def sweep_tiers(effective_l2: int, tp: int, page_size: int) -> list[int]:
    """SWEEP_TIERS capacities i/8 of `effective_l2` (i = 1..8), each a whole number of pages per rank."""
    unit = tp * page_size
    tiers = [effective_l2 * i // SWEEP_TIERS // unit * unit for i in range(1, SWEEP_TIERS + 1)]
    return sorted({t for t in tiers if t > 0})


def rungs(shared_uplink: bool, l3_tokens: int | None = None) -> list[tuple[str, str, dict]]:
    """(step, change, state) of the ladder before the capacity step, each on top of the previous;
    the L3 rung pools `l3_tokens` (None: unlimited) from the decode nodes."""
    first = state()
    out = [("baseline", "HiCache on as first built", first)]
    steps = (("layer_first", "host layout page_first_direct -> layer_first (kernel copies)", dict(host_layout="layer_first")),
             ("daemon_threads", "backups submitted inline on the scheduler thread -> daemon threads",
              dict(submission="daemon")),
             ("thp", "host pool on 4 KB pages -> transparent huge pages", dict(host_pages="thp")),
             ("numa", "host pools on a remote NUMA node -> local" + (", IDO on (cards share an uplink)"
                                                                     if shared_uplink else ""),
              dict(numa="local", ido=True)),
             ("tp_shared", "a private host pool per rank -> one shared by the TP group (interleaved over NUMA nodes)",
              dict(tp_shared=True, numa="interleave")),
             ("l3_pooled", L3_CHANGE + ("" if l3_tokens is None else f", {l3_tokens:,} tokens"),
              dict(l3="unlimited" if l3_tokens is None else l3_tokens)),
             ("per_request_hits", "write_through_selective hits counted per insert -> per request, + ghost list",
              dict(hit_count="per_request", ghost=True)))
    cur = first
    for step, change, switches in steps:
        cur = {**cur, **switches}
        out.append((step, change, cur))
    return out


def ablate(spec: CacheSpec, requests: list[TraceRequest], plateau_gain: float = DEFAULT_PLATEAU_GAIN,
           workers: int | None = None, progress: Callable[[int, int], None] | None = None,
           profile=None, runs: Runs | None = None, l3_tokens: int | None = None, engine=None,
           ensemble=None) -> dict:
    """The ladder over `requests` from `spec` (its capacities, geometry, page size, profile, TP ranks
    and concurrency; its layout, write policy and request counting are the ladder's own; L1/L2 left
    unlimited are sized as fractions of the trace). `profile`: a loaded profile to price with
    instead of the spec's; `runs`: replays to share (hicache_ref.sim.ladder.scenario.Runs over the same sized
    spec and trace); `l3_tokens`: the pooled L3 rung's capacity (None: unlimited); `engine`: what
    replays the rungs (a hicache_ref.engines.LadderEngine; None: the reference; HiCache off stays the
    reference's), a rung it does not run is not measured with the reason; `ensemble`: the parameter sets each
    rung's interval is priced over (hicache_ref.sim.price.spread; None: the profile's). `workers`: processes the
    reference's replays run on (None: one per core; 1: here). `progress(done, total)` after each replay."""
    _check(spec, requests, plateau_gain)
    if l3_tokens is not None and (isinstance(l3_tokens, bool) or not isinstance(l3_tokens, int) or l3_tokens <= 0):
        raise ValueError(f"--l3-tokens: expected a positive number of tokens, got {l3_tokens!r}")
    profile = profile if profile is not None else load_profile(spec.profile)
    spec, tp = _sized(spec, requests, profile)
    shared = bool(profile.topology and (profile.topology.devices_per_switch or 1) > 1)
    per_rank = spec.tiers.l2_tokens // spec.page_size * spec.page_size
    tiers = sweep_tiers(per_rank * tp, tp, spec.page_size)
    ladder = rungs(shared, l3_tokens)
    total = 1 + 4 + len(tiers)  # off, pfd, lf, L3, per_request, the shared pool's tiers
    done = [0]

    def tick(n) -> None:
        done[0] = n
        if progress is not None:
            progress(min(n, total), total)

    if runs is None:
        runs = Runs(spec, requests, tp, engine=engine)
    runs.progress = tick
    runs.prefetch([(state(hicache=False), 0)] + [(st, per_rank) for _, _, st in ladder], workers)
    off = runs.figures(state(hicache=False), 0)
    try:  # HiCache off priced (hicache_ref.sim.run.baseline, as every command prices it), or why not (then no rung is)
        off_price, off_why = (cost.off_price(profile, off), None) if off["requests"] else (None, "no request replayed")
    except mech.Unpriced as e:
        off_price, off_why = None, str(e)
    priced_off = (off_price, off_why, spread.members(profile) if ensemble is None else ensemble)
    rows = [_row(step, change, st, per_rank, runs, profile, tp, off, priced_off) for step, change, st in ladder]
    # the capacity step goes on top of the better of the last two: the write-policy fix is conditional
    pick = min((-1, -2), key=lambda i: (rows[i]["modeled_ttft_seconds"] is None, rows[i]["modeled_ttft_seconds"] or 0))
    last = ladder[pick][2]
    try:
        runs.prefetch([(last, t // tp) for t in tiers], workers)
        figs = [runs.figures(last, t // tp) for t in tiers]
    except NotRunOnEngine as e:  # no sweep, no plateau: the capacity step is not run either
        figs, plateau = None, None
        rows.append(_not_run("plateau_capacity", f"the capacity sweep on top of {ladder[pick][0]}", last, per_rank,
                             runs, profile, tp, str(e)))
    if figs is not None:
        plateau = find_plateau(tiers, [f["hit_rate"] for f in figs], off["hit_rate"], plateau_gain)
        plateau_per_rank = max(plateau.plateau_l2_tokens // tp // spec.page_size * spec.page_size, spec.page_size)
        where = "plateau" if plateau.on_plateau else "largest tier, not yet on the plateau"
        rows.append(_row("plateau_capacity", f"L2 {per_rank * tp:,} -> {plateau_per_rank * tp:,} tokens (sweep "
                         f"{where}, gain < {plateau_gain}), on top of {ladder[pick][0]}", last, plateau_per_rank, runs,
                         profile, tp, off, priced_off))
    if progress is not None:
        progress(total, total)
    config = dict(requests=len(requests), input_tokens=sum(r.input_length for r in requests),
                  page_size=spec.page_size, l1_tokens=spec.tiers.l1_tokens, l2_tokens=spec.tiers.l2_tokens,
                  concurrency=spec.serving.concurrency, tp=tp, profile=profile.name, geometry=spec.geometry.config(),
                  token_bytes=spec.geometry.token_bytes, shared_uplink=shared, plateau_gain=plateau_gain,
                  sweep_l2_tokens=tiers, sweep_hit_rates=None if figs is None else [f["hit_rate"] for f in figs],
                  plateau_l2_tokens=None if plateau is None else plateau.plateau_l2_tokens,
                  on_plateau=None if plateau is None else plateau.on_plateau,
                  hit_rate_l1_only=off["hit_rate"],
                  modeled_ttft_l1_only_seconds=None if off_price is None else off_price["modeled_ttft_seconds"],
                  request_counting=True, unpriced=[], l3_tokens=l3_tokens)
    if runs.engine is not None:  # as `hicache sweep --engine`: which engine replayed what
        config.update(engine=runs.engine.name, l1_only_engine="reference")
    return dict(steps=rows, configuration=config, spec=spec.to_dict(), answer=ladder_answer(rows))


def ladder_answer(rows: list[dict]) -> dict:
    """The ladder's answer: the last priced rung's (every fix on) answer word and intervals."""
    last = next((r for r in reversed(rows) if r["answer"] is not None), None)
    if last is None:
        return dict(spread.unpriced(), step=None)
    return dict({k: last[k] for k in spread.KEYS}, step=last["step"])


def _l3_notes(fig: dict) -> list[str]:
    """Why the pooled L3 rung gains little, where the ladder's write policy keeps L3 from filling."""
    l2 = fig.get("l2_tokens")
    tokens = fig["input_tokens"]
    if not fig.get("l3") or fig["write_policy"] != SELECTIVE or l2 is None or l2 >= TIGHT_L2_SHARE * tokens \
            or fig.get("l3_hit_tokens", 0) >= STARVED_L3_HIT_SHARE * tokens:
        return []
    return [f"L3 receives only pages backed up to L2 under {SELECTIVE} ({fig['l3_bytes_written']:,} bytes written, "
            f"{fig.get('l3_hit_tokens', 0):,} tokens served): with an L2 this small it stays nearly empty; replay "
            "with --write-policy write_through to see L3 fill"]


# A rung's figures that come from its replay: not measured, each with the reason, where it did not run.
REPLAYED_KEYS = ("hit_rate", "d2h_segments", "h2d_segments", "d2h_bytes", "h2d_bytes", "modeled_transfer_seconds",
                 "ttft_change_seconds", "ttft_change_pct", "net_benefit_seconds")


def _not_run(step, change, st, per_rank, runs, profile, tp, why) -> dict:
    """The row of a rung the engine did not run: its state and host side, no figure (the reason for each)."""
    spec = cache_spec(st, runs.base, per_rank, tp)
    hs = host_state(st, profile, per_rank, runs.base.geometry.token_bytes, tp)
    return dict({**spread.unpriced(), **{k: None for k in REPLAYED_KEYS}}, step=step, change=change, l2_tokens=spec.tiers.l2_tokens,
                host_layout=spec.tiers.host_layout, state=dict(st), host_state=hs.to_json(), d2h_bytes_all_ranks=None,
                host_pool_bytes_all_ranks=None, truncated_requests=None, notes=[],
                assumed_inputs=list(cost.assumed_inputs(profile)), service=None, modeled_ttft_seconds=None,
                not_measured={k: why for k in REPLAYED_KEYS})


def _row(step, change, st, per_rank, runs, profile, tp, off, priced_off) -> dict:
    off_price, off_why, ensemble = priced_off
    try:
        fig = runs.figures(st, per_rank)
    except NotRunOnEngine as e:
        return _not_run(step, change, st, per_rank, runs, profile, tp, str(e))
    hs = host_state(st, profile, per_rank, runs.base.geometry.token_bytes, tp)
    writers = 1 if st["tp_shared"] else tp
    row = dict(step=step, change=change, hit_rate=fig["hit_rate"], d2h_segments=fig["d2h_segments"],
               h2d_segments=fig["h2d_segments"], d2h_bytes=fig["d2h_bytes"], h2d_bytes=fig["h2d_bytes"],
               l2_tokens=fig["l2_tokens"], host_layout=fig["host_layout"], state=dict(st), host_state=hs.to_json(),
               d2h_bytes_all_ranks=fig["d2h_bytes"] * writers,
               host_pool_bytes_all_ranks=fig["l2_tokens"] * runs.base.geometry.token_bytes * (1 if st["tp_shared"] else tp),
               truncated_requests=fig["truncated_requests"], notes=_l3_notes(fig),
               assumed_inputs=list(cost.assumed_inputs(profile)))
    try:
        if off_price is None:
            raise mech.Unpriced(off_why)
        svc = cost.run_service(profile, fig, hs)
        priced = spread.spread(ensemble, lambda m: rung_busy(m, fig, hs, off))
    except mech.Unpriced as e:
        why = str(e)
        return {**spread.unpriced(), **row, "modeled_transfer_seconds": None, "ttft_change_seconds": None,
                "ttft_change_pct": None, "net_benefit_seconds": None, "service": None, "modeled_ttft_seconds": None,
                "not_measured": {k: why for k in ("modeled_transfer_seconds", "ttft_change_seconds",
                                                  "net_benefit_seconds")}}
    vs_off = cost.against_off(svc, fig, off_price)  # the one pricing against HiCache off (replay's too)
    return dict(priced, **row, modeled_transfer_seconds=svc.total - svc.compute,
                ttft_change_seconds=vs_off["ttft_change_seconds"], ttft_change_pct=vs_off["modeled_ttft_change_pct"],
                net_benefit_seconds=vs_off["net_benefit_seconds"], service=svc.to_json(),
                modeled_ttft_seconds=vs_off["modeled_ttft_seconds"], not_measured={})


def rung_busy(profile, fig: dict, hs: mech.HostState, off: dict) -> tuple[float, float, float | None]:
    """(busy seconds of a rung in host state `hs`, of HiCache off, TTFT change in %) under `profile`:
    what the rung's interval re-prices per ensemble member (hicache_ref.sim.price.spread)."""
    busy = cost.run_service(profile, fig, hs).total
    base = cost.off_price(profile, off)
    ttft = mech.mean_ttft_seconds(busy, fig["requests"], fig.get("concurrency"))
    ttft_off = base["modeled_ttft_seconds"]
    return busy, base["busy_seconds"], (ttft / ttft_off - 1) * 100 if ttft_off else None
