"""The seed's fix ladder over one trace: one rung per fix, each on top of the previous.

Rungs (`STEPS`), from the seed's starting point (page_first_direct host layout, backups
submitted inline on the scheduler thread, 4 KB host pages, host pools on a remote NUMA node,
write_through_selective counting hits per insert, a private host pool per TP rank, the given
L2):
1. `layer_first`: host layout page_first_direct -> layer_first (a replay: segments change);
2. `daemon_threads`: inline submission -> daemon threads (not priced: no profile figure);
3. `thp`: 4 KB pages -> transparent huge pages (not priced: no profile figure);
4. `numa`: remote NUMA -> local; where cards share an uplink (topology.devices_per_switch > 1)
   also IDO on, so backups stop paying the shared-uplink D2H factor. The seed's alternative
   there, interleaving, has no penalty figure in any profile, so local is what is priced;
5. `per_request_hits`: hits counted per request instead of per insert, plus the ghost list;
   every rung runs PD-disaggregated prefill, as the seed did (CacheSpec.pd_disagg: each
   request inserted unfinished then finished, which per-insert counting counts twice;
   not_measured where CacheSpec has no hit_count / pd_disagg fields);
6. `tp_shared`: a private host pool per rank -> one shared by the TP group (hicache_ref.tp:
   effective L2 = ranks x per-rank L2, one writer);
7. `plateau_capacity`: L2 set to the plateau of a capacity sweep of the configuration so far
   (hicache_ref.sim.sweep, tiers 1/8 .. 8/8 of its L2; serial replays).

Besides ROW_KEYS a row has `notes` (e.g. a registered-size penalty held at the nearest end of the GB
the seed measured), `l2_tokens` (the pool one replay holds: per rank when private, the group's
when shared), `d2h_bytes_all_ranks` and `host_pool_bytes_all_ranks` (over the TP group).
Each rung's figures come from its own replay (hicache_ref.sim.replay, or serving.replay_served
with `concurrency`), priced by ablate_price. Deterministic: the same trace and arguments give
the same rows, bit for bit (no wall times are kept).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hardware_profiles import load_profile
from hicache_ref.sim.ablate_price import HostSwitches, baseline_prefill_seconds, price, shared_uplink
from hicache_ref.sim.plateau import DEFAULT_PLATEAU_GAIN
from hicache_ref.sim.replay import replay
from hicache_ref.sim.replay_tp import tp_spec
from hicache_ref.sim.sweep import sweep
from hicache_ref.sim.trace import TraceRequest
from hicache_ref.spec import CacheSpec

STEPS = ("baseline", "layer_first", "daemon_threads", "thp", "numa", "per_request_hits", "tp_shared",
         "plateau_capacity")
ROW_KEYS = ("step", "change", "hit_rate", "d2h_segments", "h2d_segments", "d2h_bytes", "h2d_bytes",
            "modeled_transfer_seconds", "ttft_change_seconds", "net_benefit_seconds", "assumed_inputs", "not_measured")
EXTRA_KEYS = ("notes", "l2_tokens", "host_layout", "d2h_bytes_all_ranks", "host_pool_bytes_all_ranks", "truncated_requests")
SWEEP_TIERS = 8
NO_INLINE_FIGURE = ("the profile has no cost of an inline submission on the scheduler thread (targets."
                    "d2h_submit_block_s is a bound from one seed run, not a per-submission figure)")
NO_THP_FIGURE = ("the profile has no figure for 4 KB pages against THP (targets.host_pool_page_bytes "
                 "names the page size to use, not what 4 KB pages cost)")
NEEDS_REQPATH = "needs hit_count/pd_disagg (CacheSpec has no such fields in this tree)"


def has_request_counting() -> bool:
    """True when CacheSpec can count hits per request under PD disaggregation."""
    names = {f.name for f in dataclasses.fields(CacheSpec)}
    return {"hit_count", "pd_disagg"} <= names


def _check(spec, requests, concurrency, tp, plateau_gain) -> None:
    if not isinstance(spec, CacheSpec):
        raise ValueError(f"spec: expected a CacheSpec, got {type(spec).__name__}")
    if spec.l1_tokens is None or spec.l2_tokens is None:
        raise ValueError("spec: the ladder needs finite l1_tokens and l2_tokens (an unlimited tier has no plateau)")
    if spec.materialize:
        raise ValueError("spec: materialize is not supported by the ladder (it prices figures, not bytes)")
    if not isinstance(requests, list) or not all(isinstance(r, TraceRequest) for r in requests):
        raise ValueError("requests: expected a list of TraceRequest (hicache_ref.sim.trace.read_trace)")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise ValueError(f"concurrency: expected a positive integer or None, got {concurrency!r}")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp: expected a positive number of ranks, got {tp!r}")
    if isinstance(plateau_gain, bool) or not isinstance(plateau_gain, (int, float)) or not 0 <= plateau_gain <= 1:
        raise ValueError(f"plateau_gain: expected a number in [0, 1], got {plateau_gain!r}")
    if spec.l2_tokens < SWEEP_TIERS * tp * spec.page_size:
        raise ValueError(f"spec: l2_tokens {spec.l2_tokens:,} is below {SWEEP_TIERS} sweep tiers of "
                         f"{tp} ranks x page {spec.page_size}")


@dataclasses.dataclass(frozen=True)
class Rung:
    """One configuration of the ladder."""

    spec: CacheSpec  # what one rank replays (L2 per rank)
    switches: HostSwitches
    shared_host: bool = False


def sweep_tiers(effective_l2: int, tp: int, page_size: int) -> list[int]:
    """SWEEP_TIERS capacities i/8 of `effective_l2` (i = 1..8), each a whole number of pages per rank."""
    unit = tp * page_size
    tiers = [effective_l2 * i // SWEEP_TIERS // unit * unit for i in range(1, SWEEP_TIERS + 1)]
    return sorted({t for t in tiers if t > 0})


def ablate(spec: CacheSpec, requests: list[TraceRequest], concurrency: int | None = None, tp: int = 1,
           plateau_gain: float = DEFAULT_PLATEAU_GAIN, workers: int | None = None,
           progress: Callable[[int, int], None] | None = None) -> dict:
    """The ladder over `requests` from `spec` (its capacities, geometry, page size, profile;
    its layout and write policy are the ladder's own). `tp`: ranks of the TP group; `workers`:
    processes for the plateau sweep. `progress(done, total)` after each replay."""
    _check(spec, requests, concurrency, tp, plateau_gain)
    profile = load_profile(spec.profile)
    baseline_s = baseline_prefill_seconds(profile, requests)
    counting = has_request_counting()
    per_rank_l2 = spec.l2_tokens // spec.page_size * spec.page_size
    # replays: baseline, layer_first, per_request_hits, tp_shared, the sweep's tiers + L1 alone, the plateau
    total = 2 + counting + 1 + len(sweep_tiers(per_rank_l2 * tp, tp, spec.page_size)) + 1 + 1
    done = [0]

    def tick(*_) -> None:
        done[0] += 1
        if progress is not None:
            progress(min(done[0], total), total)

    figures: dict[Rung, dict] = {}

    def run(rung: Rung) -> dict:
        key = dataclasses.replace(rung, switches=HostSwitches())
        if key not in figures:
            figures[key] = _replay(rung, requests, concurrency, tp)
            tick()
        return figures[key]

    shared = shared_uplink(profile)
    pd = {"hit_count": "per_insert", "pd_disagg": True} if counting else {}  # the seed's PD-disaggregated prefill
    start = Rung(dataclasses.replace(spec, host_layout="page_first_direct", write_policy="write_through_selective",
                                     ghost=False, **pd), HostSwitches())
    rows, rung = [], start
    rows.append(_row("baseline", _describe_start(start, shared, tp), run(rung), rung, profile, baseline_s))
    rung = dataclasses.replace(rung, spec=dataclasses.replace(rung.spec, host_layout="layer_first"))
    rows.append(_row("layer_first", "host layout page_first_direct -> layer_first", run(rung), rung, profile,
                     baseline_s))
    rung = dataclasses.replace(rung, switches=dataclasses.replace(rung.switches, daemon_threads=True))
    rows.append(_row("daemon_threads", "backups submitted inline on the scheduler thread -> daemon threads",
                     run(rung), rung, profile, baseline_s, NO_INLINE_FIGURE))
    rung = dataclasses.replace(rung, switches=dataclasses.replace(rung.switches, thp=True))
    rows.append(_row("thp", "host pool on 4 KB pages -> transparent huge pages", run(rung), rung, profile,
                     baseline_s, NO_THP_FIGURE))
    rung = dataclasses.replace(rung, switches=dataclasses.replace(rung.switches, numa_local=True, ido_on=shared))
    rows.append(_row("numa", "host pools on a remote NUMA node -> local" + (
        f", IDO on ({profile.topology.devices_per_switch} cards per uplink; interleaving has no profile "
        "figure, local is priced)" if shared else ""), run(rung), rung, profile, baseline_s))
    if counting:
        rung = dataclasses.replace(rung, spec=dataclasses.replace(rung.spec, hit_count="per_request", ghost=True))
        rows.append(_row("per_request_hits", "write_through_selective hits counted per insert -> per request, "
                         "+ ghost list (PD-disaggregated prefill)", run(rung), rung, profile, baseline_s))
    else:
        rows.append(_skipped_row("per_request_hits", "write_through_selective hits counted per insert -> per "
                                 "request, + ghost list, PD disaggregation", NEEDS_REQPATH))
    rung = dataclasses.replace(rung, shared_host=True)
    rows.append(_row("tp_shared", f"a private host pool per rank -> one shared by the TP group of {tp}",
                     run(rung), rung, profile, baseline_s))
    effective = tp_spec(rung.spec, tp, True)
    tiers = sweep_tiers(effective.l2_tokens, tp, spec.page_size)
    swept = sweep(effective, requests, tiers, plateau_gain, method="replay", workers=workers,
                  progress=lambda d, t: tick())
    plateau = swept["plateau_l2_tokens"]
    per_rank = max(plateau // tp // spec.page_size * spec.page_size, 0)
    rung = dataclasses.replace(rung, spec=dataclasses.replace(rung.spec, l2_tokens=per_rank))
    where = "plateau" if swept["on_plateau"] else "largest tier, not yet on the plateau"
    rows.append(_row("plateau_capacity", f"L2 {effective.l2_tokens:,} -> {plateau:,} tokens (sweep {where}, "
                     f"gain < {plateau_gain})", run(rung), rung, profile, baseline_s))
    if progress is not None:
        progress(total, total)
    return dict(steps=rows, configuration=_configuration(spec, requests, profile, concurrency, tp, plateau_gain,
                                                         tiers, swept, baseline_s))


def _describe_start(rung: Rung, shared: bool, tp: int) -> str:
    s = rung.spec
    return (f"page_first_direct, inline submission, 4 KB pages, remote NUMA{', IDO off' if shared else ''}, "
            f"write_through_selective per insert{' under PD disaggregation' if s.pd_disagg else ''}, private host pools (TP {tp}), L1 {s.l1_tokens:,} / "
            f"L2 {s.l2_tokens:,} tokens per rank")


def _replay(rung: Rung, requests, concurrency, tp: int) -> dict:
    run = tp_spec(rung.spec, tp, rung.shared_host)
    if concurrency is None:
        fig = replay(run, requests)
    else:
        from hicache_ref.sim.serving import replay_served

        fig = replay_served(run, requests, concurrency, pd=True)  # PD: prefill releases after its transfer
    fig["token_bytes"] = run.geometry().token_bytes
    writers = 1 if rung.shared_host else tp
    fig["d2h_bytes_all_ranks"] = fig["d2h_bytes"] * writers
    fig["host_pool_bytes_all_ranks"] = fig["l2_tokens"] * fig["token_bytes"] * (1 if rung.shared_host else tp)
    return fig


def _row(step, change, fig, rung: Rung, profile, baseline_s, unpriced: str | None = None) -> dict:
    p = price(profile, fig, rung.switches, baseline_s, unpriced)
    return dict(step=step, change=change, hit_rate=fig["hit_rate"], d2h_segments=fig["d2h_segments"],
                h2d_segments=fig["h2d_segments"], d2h_bytes=fig["d2h_bytes"], h2d_bytes=fig["h2d_bytes"],
                modeled_transfer_seconds=p.transfer_s, ttft_change_seconds=p.ttft_change_s,
                net_benefit_seconds=p.net_benefit_s, assumed_inputs=list(p.assumed_inputs),
                not_measured=p.not_measured, notes=list(p.notes), l2_tokens=fig["l2_tokens"], host_layout=fig["host_layout"],
                d2h_bytes_all_ranks=fig["d2h_bytes_all_ranks"],
                host_pool_bytes_all_ranks=fig["host_pool_bytes_all_ranks"],
                truncated_requests=fig["truncated_requests"])


def _skipped_row(step: str, change: str, why: str) -> dict:
    row = {k: None for k in (*ROW_KEYS, *EXTRA_KEYS)}
    row.update(step=step, change=change, assumed_inputs=[], notes=[],
               not_measured={k: why for k in ROW_KEYS if k not in ("step", "change", "assumed_inputs",
                                                                  "not_measured")})
    return row


def _configuration(spec, requests, profile, concurrency, tp, plateau_gain, tiers, swept, baseline_s) -> dict:
    return dict(requests=len(requests), input_tokens=sum(r.input_length for r in requests),
                page_size=spec.page_size, l1_tokens=spec.l1_tokens, l2_tokens=spec.l2_tokens,
                concurrency=concurrency, tp=tp, profile=profile.name, geometry=spec.geometry_config(),
                token_bytes=spec.geometry().token_bytes, baseline_prefill_seconds=baseline_s,
                shared_uplink=shared_uplink(profile), plateau_gain=plateau_gain, sweep_l2_tokens=tiers,
                sweep_hit_rates=[t["hit_rate"] for t in swept["tiers"]],
                plateau_l2_tokens=swept["plateau_l2_tokens"], on_plateau=swept["on_plateau"],
                request_counting=has_request_counting(),
                unpriced=["daemon_threads: " + NO_INLINE_FIGURE, "thp: " + NO_THP_FIGURE])
