"""`advise`: for each profile, size the tiers, search, rank, decide, and say it (hicache_ref.advise).

One trace, one set of replays shared by every profile (a replay does not depend on the profile);
each profile prices them with its own ensemble. The same inputs give the same result, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

from hicache_ref.advise import flags as fl
from hicache_ref.advise.ranking import decide, ranked
from hicache_ref.advise.replays import Replays
from hicache_ref.advise.search import Search, l3_priced
from hicache_ref.advise.space import check_host_gib, host_budget_tokens, l2_tiers, ranks_on_node
from hicache_ref.sim.run.baseline import off_spec
from hicache_ref.sim.sweep.plateau import DEFAULT_PLATEAU_GAIN
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.sim.trace.stack_distance import stack_profile
from hicache_ref.spec import CacheSpec


def _check(pairs, requests) -> None:
    if not pairs:
        raise ValueError("--profile: give at least one profile")
    for _, spec in pairs:
        if not isinstance(spec, CacheSpec):
            raise ValueError(f"spec: expected a CacheSpec, got {type(spec).__name__}")
        if spec.tiers.l1_tokens is None:
            raise ValueError("--l1-tokens: advise needs L1's size: give --l1-tokens, or --model with a profile "
                             "that gives device.hbm_gib (hicache calibrate on the node writes it)")
        if spec.tiers.materialize or spec.storage.l3 is not None:
            raise ValueError("--l3: advise prices figures and tries L3 itself; drop it")
    if not isinstance(requests, list) or not all(isinstance(r, TraceRequest) for r in requests):
        raise ValueError("requests: expected a list of TraceRequest (hicache_ref.sim.trace.reader.read_trace)")


def reuse_of(requests, page_size: int):
    """(stack profile, {ceiling_hit_rate, distinct_tokens}) of the trace at `page_size`."""
    sp = stack_profile(requests, page_size)
    distinct = int((sp.full_pages - sp.seen_pages).sum()) * page_size
    ceiling = float(sp.hit_rate([2**62])[0]) if len(requests) else 0.0
    return sp, dict(ceiling_hit_rate=ceiling, distinct_tokens=distinct)


def advise(pairs: list[tuple], requests: list[TraceRequest], plateau_gain: float = DEFAULT_PLATEAU_GAIN,
           progress: Callable[[int], None] | None = None, host_gib=None) -> dict:
    """The advice for each (profile, spec) in `pairs` (the spec sized for that profile, its --tp or
    none) on `requests`. `progress(replays run)` after each replay; `host_gib`: one node's host
    memory in place of each profile's, one figure for all or a list with one per pair (None: the
    profile's)."""
    _check(pairs, requests)
    gibs = list(host_gib) if isinstance(host_gib, list | tuple) else [host_gib] * len(pairs)
    if len(gibs) != len(pairs):
        raise ValueError(f"--host-gib: {len(gibs)} figures for {len(pairs)} profiles: give one, or one per --profile")
    for (profile, spec), gib in zip(pairs, gibs, strict=True):  # every host budget before the first replay
        ranks, tb, ps = ranks_on_node(profile, _tp(profile, spec)), spec.geometry.token_bytes, spec.page_size
        if gib is not None:
            check_host_gib(gib, spec.tiers.l1_tokens // ps * ps, ps, tb, ranks)
        host_budget_tokens(profile, tb, ranks, gib)
    replays = Replays(requests, progress)
    stacks: dict[int, tuple] = {}
    out = []
    for (profile, spec), gib in zip(pairs, gibs, strict=True):
        ps = spec.page_size
        if ps not in stacks:
            stacks[ps] = reuse_of(requests, ps)
        out.append(_one(profile, spec, requests, replays, stacks[ps], plateau_gain, gib))
    return dict(profiles=out, replays_run=replays.count, requests=len(requests),
                input_tokens=sum(r.input_length for r in requests), plateau_gain=plateau_gain)


def _tp(profile, spec) -> int:
    """The TP group advised for: --tp, else one rank per card of the profile's node."""
    return spec.tp.ranks if spec.tp.ranks is not None else (profile.device.devices_per_node or 1)


def _one(profile, spec, requests, replays, stack, plateau_gain, host_gib) -> dict:
    sp, reuse = stack
    tp = _tp(profile, spec)
    base = spec.replace(tp=None, shared_host=False)
    ps, tb, l1 = base.page_size, base.geometry.token_bytes, base.tiers.l1_tokens // base.page_size * base.page_size
    whole = sum(-(-r.input_length // ps) * ps for r in requests)
    budget, budget_line = host_budget_tokens(profile, tb, ranks_on_node(profile, tp), host_gib)
    tiers = l2_tiers(l1, ps, tb, whole, budget)
    off = replays.figures(off_spec(base))
    search = Search(base, profile, tp, replays, off)
    rates = [float(x) for x in sp.hit_rate([t for _, t in tiers])] if tiers else []
    l1_alone = float(sp.hit_rate([l1])[0])
    why_l3 = l3_priced(profile)
    searched = tiers and search.pricer.off_why is None  # nothing to rank where HiCache off has no price
    ladder = search.run(tiers, rates, plateau_gain, base.geometry.attention, why_l3 is None) if searched else []
    rows = ranked(search.tried)
    decision = decide(rows, reuse, l1, off["hit_rate"])
    if not searched and decision["reason"].startswith("not priced") and search.pricer.off_why:
        decision["reason"] = f"not priced: HiCache off is not priced: {search.pricer.off_why}"
    chosen = decision["pick"] or decision["best"]
    sizes = list((spec.machine_sizing or {}).get("arithmetic", [])) or [f"L1: {l1:,} tokens per rank (--l1-tokens)"]
    sizes += [budget_line, f"L2 per rank by --hicache-ratio R, as upstream: int({l1:,} x R) rounded down to pages of "
              f"{ps}, plus one page; " + (", ".join(f"R {r:g}: {t:,} tokens ({t * tb / 1e9:,.1f} GB)" for r, t in tiers)
                                          or "none fits the host memory")]
    result = dict(profile=profile.name, tp=tp, l1_tokens=l1, token_bytes=tb, page_size=ps, sizes=sizes,
                  hicache_off=dict(hit_rate=off["hit_rate"], requests=off["requests"]),
                  reuse=dict(reuse, l1_alone_hit_rate=l1_alone),
                  curve=[dict(hicache_ratio=r, l2_tokens=t, hit_rate=h) for (r, t), h in zip(tiers, rates, strict=True)],
                  ladder=ladder, l3_not_priced=why_l3,
                  ranked=[dict(c.to_json(), hit_rate=f["hit_rate"], **p.to_json()) for c, f, p in rows],
                  on=decision["on"], reason=decision["reason"])
    if chosen is not None and chosen[2].ttft_change_pct is not None:
        c = chosen[0]
        result.update(host_ladder=search.host_ladder(c))
        if not decision["on"]:  # what came closest, said beside the reason; no flags to paste
            result["best_tried"] = c.to_json()
        else:
            result.update(pick=c.to_json(), host_settings=fl.host_settings(c, profile, tp, tb),
                          flags=fl.launch_flags(c, ps, tp, (spec.machine_sizing or {}).get("mem_fraction_static"),
                                                base.storage.prefetch_policy or "wait_complete"))
            result["command"] = fl.command_line(result["flags"])
    # the answer of this profile in the keys every command's JSON spells (hicache_ref.sim.price.spread):
    # the pick's, else what came closest; None where nothing is priced
    priced = chosen[2].to_json() if chosen is not None else {}
    result.update({k: priced.get(k) for k in ANSWER_KEYS})
    result["headline"] = headline(result, chosen)
    return result


ANSWER_KEYS = ("answer", "ttft_change_pct", "ttft_change_pct_interval", "net_benefit_seconds",
               "net_benefit_seconds_interval")


def headline(r: dict, chosen) -> str:
    """The first line: on or off, TTFT change and net benefit with their intervals, the word."""
    if chosen is None:
        return f"leave HiCache off ({r['profile']}): {r['reason']}"
    p = chosen[2]
    if p.ttft_change_pct is None:
        return f"leave HiCache off ({r['profile']}): {r['reason']}"
    lo, hi = p.ttft_interval
    a, b = p.net_interval
    figs = (f"TTFT {p.ttft_change_pct:+.2f}% [{lo:+.2f}%, {hi:+.2f}%], net benefit {p.net_benefit_seconds:+,.2f} s "
            f"[{a:+,.2f}, {b:+,.2f}] over HiCache off: {p.word}")
    if r["on"]:
        return f"turn HiCache on ({r['profile']}, {chosen[0].label()}): {figs}"
    return f"leave HiCache off ({r['profile']}): {r['reason']}; best tried {chosen[0].label()}: {figs}"
