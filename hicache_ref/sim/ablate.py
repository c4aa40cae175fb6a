"""The seed's fix ladder over one trace: one rung per fix, each on top of the previous.

It shows what each of the seed's fixes is worth on a trace (`hicache ablate`).
Each rung's figures come from its own replay, priced by ablate_price.
The same trace and arguments give the same rows, bit for bit.
The rungs (`STEPS`) and row fields: hicache_ref/README.md, "Fix ladder" and "Design notes".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hardware_profiles import load_profile
from hicache_ref.sim.ablate_price import HostSwitches, baseline_prefill_seconds, price, shared_uplink
from hicache_ref.sim.plateau import DEFAULT_PLATEAU_GAIN
from hicache_ref.sim.replay import replay
from hicache_ref.sim.serving import replay_served
from hicache_ref.sim.sweep import sweep
from hicache_ref.sim.trace import TraceRequest
from hicache_ref.spec import CacheSpec, SpecError
from hicache_ref.spec.memory import check_capacity

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
# Without --l1-tokens/--l2-tokens: L1 and L2 as these fractions of the trace's page-rounded tokens.
DEFAULT_L1_FRACTION, DEFAULT_L2_FRACTION = 16, 4


def _check(spec, requests, plateau_gain) -> None:
    if not isinstance(spec, CacheSpec):
        raise ValueError(f"spec: expected a CacheSpec, got {type(spec).__name__}")
    if spec.tiers.materialize:
        raise ValueError("--materialize: not supported by the ladder (it prices figures, not bytes)")
    if not isinstance(requests, list) or not all(isinstance(r, TraceRequest) for r in requests):
        raise ValueError("requests: expected a list of TraceRequest (hicache_ref.sim.trace.read_trace)")
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


def ablate(spec: CacheSpec, requests: list[TraceRequest], plateau_gain: float = DEFAULT_PLATEAU_GAIN,
           workers: int | None = None, progress: Callable[[int, int], None] | None = None) -> dict:
    """The ladder over `requests` from `spec` (its capacities, geometry, page size, profile, TP ranks
    and concurrency; its layout, write policy and request counting are the ladder's own; L1/L2 left
    unlimited are sized as fractions of the trace). `workers`: processes for the plateau sweep.
    `progress(done, total)` after each replay."""
    _check(spec, requests, plateau_gain)
    profile = load_profile(spec.profile)
    spec, tp = _sized(spec, requests, profile)
    concurrency = spec.serving.concurrency
    baseline_s = baseline_prefill_seconds(profile, requests)
    per_rank_l2 = spec.tiers.l2_tokens // spec.page_size * spec.page_size
    # replays: baseline, layer_first, per_request_hits, tp_shared, the sweep's tiers + L1 alone, the plateau
    total = 2 + 1 + 1 + len(sweep_tiers(per_rank_l2 * tp, tp, spec.page_size)) + 1 + 1
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
    start = Rung(spec.replace(host_layout="page_first_direct", write_policy="write_through_selective", ghost=False,
                              hit_count="per_insert", pd_disagg=True), HostSwitches())  # the seed's PD prefill
    rows, rung = [], start
    rows.append(_row("baseline", _describe_start(start, shared, tp), run(rung), rung, profile, baseline_s))
    rung = dataclasses.replace(rung, spec=rung.spec.replace(host_layout="layer_first"))
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
    rung = dataclasses.replace(rung, spec=rung.spec.replace(hit_count="per_request", ghost=True))
    rows.append(_row("per_request_hits", "write_through_selective hits counted per insert -> per request, "
                     "+ ghost list (PD-disaggregated prefill)", run(rung), rung, profile, baseline_s))
    rung = dataclasses.replace(rung, shared_host=True)
    rows.append(_row("tp_shared", f"a private host pool per rank -> one shared by the TP group of {tp}",
                     run(rung), rung, profile, baseline_s))
    effective = shared_l2(rung.spec, tp)
    tiers = sweep_tiers(effective.tiers.l2_tokens, tp, spec.page_size)
    swept = sweep(effective, requests, tiers, plateau_gain, method="replay", workers=workers,
                  progress=lambda d, t: tick())
    plateau = swept["plateau_l2_tokens"]
    per_rank = max(plateau // tp // spec.page_size * spec.page_size, 0)
    rung = dataclasses.replace(rung, spec=rung.spec.replace(l2_tokens=per_rank))
    where = "plateau" if swept["on_plateau"] else "largest tier, not yet on the plateau"
    rows.append(_row("plateau_capacity", f"L2 {effective.tiers.l2_tokens:,} -> {plateau:,} tokens (sweep {where}, "
                     f"gain < {plateau_gain})", run(rung), rung, profile, baseline_s))
    if progress is not None:
        progress(total, total)
    return dict(steps=rows, configuration=_configuration(spec, requests, profile, concurrency, tp, plateau_gain,
                                                         tiers, swept, baseline_s), spec=spec.to_dict())


def _describe_start(rung: Rung, shared: bool, tp: int) -> str:
    s = rung.spec
    pd = " under PD disaggregation" if s.serving.pd_disagg else ""
    return (f"page_first_direct, inline submission, 4 KB pages, remote NUMA{', IDO off' if shared else ''}, "
            f"write_through_selective per insert{pd}, private host pools (TP {tp}), L1 {s.tiers.l1_tokens:,} / "
            f"L2 {s.tiers.l2_tokens:,} tokens per rank")


def _replay(rung: Rung, requests, concurrency, tp: int) -> dict:
    run = shared_l2(rung.spec, tp) if rung.shared_host else rung.spec
    # served: PD disaggregation (every rung's) releases each prefill right after its transfer
    fig = replay(run, requests) if concurrency is None else replay_served(run, requests)
    fig["token_bytes"] = run.geometry.token_bytes
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


def _configuration(spec, requests, profile, concurrency, tp, plateau_gain, tiers, swept, baseline_s) -> dict:
    return dict(requests=len(requests), input_tokens=sum(r.input_length for r in requests),
                page_size=spec.page_size, l1_tokens=spec.tiers.l1_tokens, l2_tokens=spec.tiers.l2_tokens,
                concurrency=concurrency, tp=tp, profile=profile.name, geometry=spec.geometry.config(),
                token_bytes=spec.geometry.token_bytes, baseline_prefill_seconds=baseline_s,
                shared_uplink=shared_uplink(profile), plateau_gain=plateau_gain, sweep_l2_tokens=tiers,
                sweep_hit_rates=[t["hit_rate"] for t in swept["tiers"]],
                plateau_l2_tokens=swept["plateau_l2_tokens"], on_plateau=swept["on_plateau"],
                request_counting=True,
                unpriced=["daemon_threads: " + NO_INLINE_FIGURE, "thp: " + NO_THP_FIGURE])
