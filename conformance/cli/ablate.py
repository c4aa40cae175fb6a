"""`hicache ablate`: the seed's fix ladder over a trace, one row per fix, each on top of the previous.

Parse, build the spec (options from its fields), call hicache_ref.sim.ladder.ablate.ablate, print or write.
`--engine sglang` replays each rung through SGLang's HiCache (hicache_ref.engines): a rung that
needs a switch it does not run is not measured with the reason; where SGLang cannot run here:
NOT RUN with the reason, exit 3, as replay.
"""

from __future__ import annotations

from pathlib import Path

from conformance.cli.replay import trace_arg
from conformance.cli.sweep import PLATEAU_GAIN
from conformance.common import args as types
from conformance.common.errors import EXIT_NOT_RUN, CliError
from conformance.common.inputs import load_profile_arg, output_folder, page_tokens, requests_of
from conformance.common.outputs import emit_result
from conformance.common.progress import bar
from conformance.common.spec_options import add_local, add_spec_options, sizing_lines, spec_from_args
from hicache_ref.sim.ladder.ablate import ablate
from hicache_ref.sim.sweep.plateau import DEFAULT_PLATEAU_GAIN
from hicache_ref.sim.trace.reader import read_trace

HELP = "the seed's fix ladder over a trace: hit rate, transfers, modeled TTFT change and net benefit per fix"
LOCAL_OPTIONS = ("--scenario", "--trace", "--plateau-gain", "--l3-tokens", "--limit", "--engine", "--out", "--json",
                 "--quiet")
SCENARIOS = ("seed",)


def add_arguments(p) -> None:
    """Options: the spec fields that apply to the ladder (--l1-tokens / --l2-tokens default to 1/16 and
    1/4 of the trace's tokens here, --tp to the profile's devices per node) and the local ones."""
    p.add_argument("--scenario", choices=SCENARIOS,
                   help="seed: the seed's scenario (its trace, TP 8, PD, concurrency 10, tiers per "
                        "hardware_profiles/readings/<profile>.yaml) and its readings, seed vs model; a profile "
                        "without readings: the seed's workload priced with it, no readings")
    add_local(p, "--trace")
    add_local(p, "--plateau-gain", type=PLATEAU_GAIN, default=DEFAULT_PLATEAU_GAIN,
              help=f"the capacity step's plateau threshold (default {DEFAULT_PLATEAU_GAIN})")
    add_local(p, "--l3-tokens", help="the l3_pooled rung's L3 capacity in tokens, pooled from decode nodes "
              "(the model store; default: unlimited)")
    add_local(p, "--limit", type=types.count(1))
    add_local(p, "--engine", help="which HiCache replays each rung: reference, or sglang (SGLang's installed "
              "HiCache on the HAL; HiCache off stays the reference's, a rung needing --tp, --l3 or --ghost, or "
              "pools larger than this machine's memory, is not measured)")
    add_spec_options(p, "ablate")
    add_local(p, "--out")
    add_local(p, "--json")
    add_local(p, "--quiet")


def run(a) -> int:
    spec = spec_from_args(a, "ablate")
    profile = load_profile_arg("--profile", spec.profile)
    out = output_folder("--out", a.out)
    from conformance.cli.plots import ablate_plot
    from hicache_ref.engines import engine_for

    engine = engine_for(a.engine)
    if engine is not None and engine.absent is not None:
        print(f"hicache ablate: NOT RUN: engine {a.engine}: {engine.absent}", flush=True)
        return EXIT_NOT_RUN
    if a.scenario == "seed":
        return _seed(a, spec, profile, out, ablate_plot, engine)
    trace = trace_arg(a.trace)
    l3 = page_tokens("--l3-tokens", a.l3_tokens, spec.page_size) if a.l3_tokens is not None else None
    result = ablate(spec, requests_of("--trace", trace, read_trace(trace, a.limit)), plateau_gain=a.plateau_gain,
                    progress=bar("hicache ablate", a.quiet, " replays"), l3_tokens=l3, engine=engine)
    result["configuration"]["trace"] = str(trace)
    lines = sizing_lines(spec) + table_lines(result)
    emit_result(result, out, "ablate", ablate_plot, a.json, lines, report=_page(out, result, lines))
    return 0


def _page(out, result: dict, lines: list[str]) -> str | None:
    """report.html's text with --out, made before any file is written."""
    if out is None:
        return None
    from conformance.report.team_results import ablate_page

    return ablate_page(result, lines)


SCENARIO_OWN = ("scenario", "profile", "plateau_gain", "engine", "out", "json", "quiet")  # what --scenario seed leaves to the user


def _fixed_by_scenario(a) -> str | None:
    """The first option given that the seed scenario sets itself (its trace, tiers, geometry,
    serving, policies), spelled as on the command line; None when there is none."""
    import argparse

    p = argparse.ArgumentParser(allow_abbrev=False)
    add_arguments(p)
    for action in p._actions:
        dest = action.dest
        if dest in SCENARIO_OWN or dest == "help" or not action.option_strings:
            continue
        if getattr(a, dest, None) != action.default:
            return action.option_strings[-1]
    return None


def _seed(a, spec, profile, out, ablate_plot, engine) -> int:
    """The seed scenario: the ladder on the scenario's trace and tiers, and every reading."""
    from hardware_profiles.measured_readings import load_readings
    from hicache_ref.sim.fit.seed_report import SEED_READINGS, seed_ladder, seed_workload

    readings = load_readings(profile)
    given = _fixed_by_scenario(a)
    if given:
        raise CliError(given, "the seed scenario sets it (its trace, tiers, geometry and serving: hardware_profiles/"
                       f"readings/{profile.readings or SEED_READINGS}, `scenario`); drop it or leave out --scenario")
    if readings is None:  # no readings of its own: the seed's workload priced on this profile
        from hicache_ref.sim.price.mechanisms import Unpriced
        from hicache_ref.sim.price.prefill_model import require_compute

        try:
            require_compute(profile)
        except Unpriced as e:
            raise CliError("--scenario", f"profile {profile.name} names no readings file (`readings:`) and cannot "
                           f"price the seed's workload: {e}") from None
        result = seed_workload(profile, plateau_gain=a.plateau_gain,
                               progress=bar("hicache ablate", a.quiet, " replays"), engine=engine)
        a_ = result["answer"]
        change = "not priced" if a_["ttft_change_pct"] is None else f"TTFT {a_['ttft_change_pct']:+.2f}%"
        emit_result(result, out, "ablate", ablate_plot, a.json, table_lines(result) + [
            "", f"the seed's workload (hardware_profiles/readings/{SEED_READINGS}, scenario) priced with profile "
                f"{profile.name}: {change} vs HiCache off at {a_['step']}; no readings of {profile.name} to check"])
        return 0
    result = seed_ladder(profile, readings, plateau_gain=a.plateau_gain,
                         progress=bar("hicache ablate", a.quiet, " replays"), engine=engine)
    from conformance.cli.plots import readings_plot

    lines = table_lines(result) + [""] + readings_lines(result)
    emit_result(result, out, "ablate", lambda path, r: (ablate_plot(path, r), readings_plot(
        Path(path).with_name("readings.png"), r)), a.json, lines, report=_page(out, result, lines),
        also=("readings.png",))
    return 0


def readings_lines(r: dict) -> list[str]:
    """The readings table: seed vs model, tolerance, within."""
    rows = r["readings"]
    lines = [f"{'reading':<34} {'seed':>10} {'model':>10} {'unit':<9} {'tolerance':<12} within {'left out':>10} within"]
    for x in rows:
        t = x["tolerance"]
        tol = {"relative": f"+-{t['size'] * 100:g}%", "points": f"+-{t['size']:g} pt"}.get(t["kind"], t["kind"])
        model = "n/m" if x["model"] is None else f"{x['model']:.4g}"
        verdict = "n/m" if x["within"] is None else ("yes" if x["within"] else "NO")
        loo = "" if x.get("loo_within") is None else (
            f" {_num(x['loo_model'], '.4g'):>10} {'yes' if x['loo_within'] else 'NO'}")
        lines.append(f"{x['reading']:<34} {x['seed']:>10.4g} {model:>10} {x['unit']:<9} {tol:<12} {verdict:<6}{loo}")
    ok = sum(1 for x in rows if x["within"])
    lines.append(f"{ok} of {len(rows)} readings within tolerance")
    ans = r["answer"]
    if ans.get("readings_loo_total"):
        worst = "; ".join(f"{w['reading']} {_num(w['left_out'], '.4g')} vs {w['seed']:.4g} {w['unit']}"
                          for w in ans.get("loo_worst") or [])
        lines.append(f"left out: {ans['readings_loo_within']} of {ans['readings_loo_total']} jointly fitted readings "
                     f"predicted within tolerance by a fit without them" + (f" (worst: {worst})" if worst else ""))
    if ans["ttft_change_pct"] is not None:
        lo, hi = ans["ttft_change_pct_interval"] or (ans["ttft_change_pct"],) * 2
        lines.append(f"answer: {ans['answer']}: with every fix, HiCache changes TTFT by {ans['ttft_change_pct']:+.1f}% "
                     f"[{lo:+.1f}%, {hi:+.1f}%, 5-95%] against HiCache off (the seed measured "
                     f"{ans['seed_ttft_change_pct']:+.2f}%)")
    return lines


def _num(v, fmt: str) -> str:
    return "n/m" if v is None else format(v, fmt)


def _interval(iv) -> str:
    return "n/m" if iv is None else f"[{iv[0]:+.2f}, {iv[1]:+.2f}]"


def answer_line(ans: dict) -> str:
    """The first line: the ladder's answer (its last priced rung, every fix on) with its intervals."""
    if ans.get("answer") is None:
        return "answer: not modeled (no rung could be priced: see n/m below)"
    from hicache_ref.sim.price.spread import phrase

    return phrase(ans, f"HiCache off, every fix on ({ans['step']})")


def table_lines(r: dict) -> list[str]:
    c = r["configuration"]
    gib = 2**30
    served = "serial" if c["concurrency"] is None else f"concurrency {c['concurrency']}"
    engine = f", rungs on engine {c['engine']} (HiCache off on the reference)" if "engine" in c else ""
    lines = [answer_line(r["answer"]),
             f"{c['requests']:,} requests, profile {c['profile']}, TP {c['tp']}, L1 {c['l1_tokens']:,} / L2 "
             f"{c['l2_tokens']:,} tokens per rank, {served}{engine}",
             f"{'step':<17} {'hit rate':>8} {'D2H seg':>9} {'H2D seg':>9} {'D2H GiB':>8} {'H2D GiB':>8} "
             f"{'xfer s':>9} {'TTFT chg s':>11} {'TTFT %':>8} {'TTFT % 5-95':>17} {'net s':>11} answer"]
    for s in r["steps"]:
        lines.append(f"{s['step']:<17} {_num(s['hit_rate'], '.4f'):>8} {_num(s['d2h_segments'], ','):>9} "
                     f"{_num(s['h2d_segments'], ','):>9} "
                     f"{_num(None if s['d2h_bytes'] is None else s['d2h_bytes'] / gib, '.2f'):>8} "
                     f"{_num(None if s['h2d_bytes'] is None else s['h2d_bytes'] / gib, '.2f'):>8} "
                     f"{_num(s['modeled_transfer_seconds'], '.3f'):>9} {_num(s['ttft_change_seconds'], '+.4f'):>11} "
                     f"{_num(s.get('ttft_change_pct'), '+.2f'):>8} {_interval(s.get('ttft_change_pct_interval')):>17} "
                     f"{_num(s['net_benefit_seconds'], '+.2f'):>11} {s.get('answer') or 'n/m'}")
    unmeasured = [(s["step"], why) for s in r["steps"] for why in sorted(set(s["not_measured"].values()))]
    if unmeasured:
        lines.append("n/m: not measured:")
        lines += [f"  {step}: {why}" for step, why in unmeasured]
    lines += [f"note, {s['step']}: {n}" for s in r["steps"] for n in s["notes"]]
    assumed = sorted({k for s in r["steps"] for k in s["assumed_inputs"]})
    if assumed:
        lines.append(f"assumed profile inputs: {', '.join(assumed)}")
    return lines
