"""`hicache sweep`: grow L2 tier by tier over a trace; hit rate, transfers, registered bytes, plateau.

Parse, build the spec (options from its fields; --l2-tokens here is the list of tiers), call
hicache_ref.sim.sweep.sweep_l2.sweep, print or write sweep.json and sweep.png. `--engine sglang` (with
`--method replay`) replays every L2 tier through SGLang's HiCache (hicache_ref.engines); where
it cannot run: NOT RUN with the reason, exit 3, as replay.
"""

from __future__ import annotations

import sys

from conformance.cli.replay import trace_arg
from conformance.common import args as types
from conformance.common.errors import EXIT_NOT_RUN, CliError, clip, engine_error
from conformance.common.inputs import load_profile_arg, output_folder, page_tokens, requests_of
from conformance.common.outputs import emit_result
from conformance.common.progress import bar
from conformance.common.spec_options import add_local, add_spec_options, sizing_lines, spec_from_args
from hal.common.units import HELP as UNITS
from hicache_ref.sim.sweep.plateau import DEFAULT_PLATEAU_GAIN
from hicache_ref.sim.sweep.sweep_l2 import METHODS, sweep
from hicache_ref.sim.trace.reader import read_trace

PLATEAU_GAIN = types.unit_interval("a hit-rate gain")  # --plateau-gain here and in ablate
PLATEAU_HELP = "a tier gaining less hit rate than this is on the plateau"
HELP = "sweep L2 (or, with --l3-tokens, L3) capacity over a trace: hit rate and transfers per tier, and where the gain plateaus"
MAX_TIERS = 64
# --l2-tokens is a list of tiers here (one capacity in replay and ablate: the spec field).
LOCAL_OPTIONS = ("--trace", "--l2-tokens", "--l3-tokens", "--plateau-gain", "--method", "--engine", "--limit", "--out",
                 "--json", "--quiet")


def add_arguments(p) -> None:
    add_local(p, "--trace")
    add_local(p, "--l2-tokens", required=True, help=f"L2 tiers in tokens, comma-separated, increasing: 4M,8M,16M ({UNITS})")
    add_local(p, "--l3-tokens", help="L3 tiers in tokens, comma-separated, increasing: grows the model L3 "
              "(--l3 model:) over one fixed L1 and --l2-tokens (one capacity then) instead of L2")
    add_local(p, "--plateau-gain", type=PLATEAU_GAIN, default=DEFAULT_PLATEAU_GAIN,
              help=f"{PLATEAU_HELP} (default {DEFAULT_PLATEAU_GAIN})")
    add_local(p, "--method", default="auto", choices=METHODS,
              help="one_pass (stack distances), replay (one per tier, in parallel), auto: one_pass where it applies")
    add_local(p, "--engine", help="which HiCache replays each L2 tier (--method replay): reference, or sglang "
              "(SGLang's installed HiCache on the HAL, serially; the L1-alone baseline stays the reference's)")
    add_local(p, "--limit", type=types.count(1))
    add_spec_options(p, "sweep")
    add_local(p, "--out")
    add_local(p, "--json")
    add_local(p, "--quiet")


def parse_tiers(text: str, page_size: int, option: str = "--l2-tokens") -> list[int]:
    parts = [t.strip() for t in text.split(",")]
    if len(parts) > MAX_TIERS:
        raise CliError(option, f"{len(parts)} tiers; at most {MAX_TIERS}")
    tiers = [page_tokens(option, t, page_size) for t in parts]
    if any(b <= a for a, b in zip(tiers, tiers[1:], strict=False)):
        raise CliError(option, f"tiers must be strictly increasing, got {clip(text)}")
    return tiers


def run_l3(a, spec, trace) -> int:
    """`--l3-tokens`: the model L3 grown tier by tier over one L1 and one L2 (hicache_ref.sim.sweep.sweep_l3)."""
    from hicache_ref.sim.sweep.sweep_l3 import sweep_l3

    l2 = parse_tiers(a.l2_tokens, spec.page_size)
    if len(l2) != 1:
        raise CliError("--l2-tokens", "with --l3-tokens: one L2 capacity (L3 is what grows)")
    if a.method != "auto":
        raise CliError("--method", "with --l3-tokens: each L3 tier is a replay (leave --method out)")
    tiers = parse_tiers(a.l3_tokens, spec.page_size, "--l3-tokens")
    out = output_folder("--out", a.out)
    try:
        result = sweep_l3(spec.replace(l2_tokens=l2[0]), read_trace(trace, a.limit), tiers, a.plateau_gain,
                          progress=bar("hicache sweep", a.quiet))
    except ValueError as e:
        option, _, why = str(e).partition(": ")
        raise CliError(option if option.startswith("--") else "--l3-tokens", why if option.startswith("--") else str(e)) from None
    result.pop("wall_seconds")
    result["trace"] = str(trace)
    if result["warning"]:
        print(f"hicache: warning: {result['warning']}", file=sys.stderr, flush=True)
    from conformance.cli.plots import sweep_l3_plot

    lines = summary_l3_lines(result)
    emit_result(result, out, "sweep", sweep_l3_plot, a.json, lines, report=_page(out, result, lines))
    return 0


def _page(out, result: dict, lines: list[str]) -> str | None:
    """report.html's text with --out, made before any file is written."""
    if out is None:
        return None
    from conformance.report.team_results import sweep_page

    return sweep_page(result, lines)


NET_HEAD = "net s 5-95%, answer"


def net_interval(t: dict) -> str:
    """A tier's net-benefit interval and answer word: its central net benefit is never shown bare."""
    iv = t.get("net_benefit_seconds_interval")
    if iv is None or t.get("answer") is None:
        return ""
    return f"  [{iv[0]:+.2f}, {iv[1]:+.2f}] {t['answer']}"


def answer_line(r: dict, tier: str) -> str:
    """The first line: the answer at the capacity worth deploying, with its intervals."""
    at = r.get(f"answer_{tier}_tokens")
    if r.get("answer") is None:
        why = r["tiers"][0].get("net_benefit_reason") if r["tiers"] else None
        if r.get("none_pays"):
            return f"answer: no {tier[:2].upper()} tier pays (the plateau line below says against what)"
        if at is None and r["tiers"]:
            why = "the smallest tier is already on the plateau: no capacity to answer for"
        return f"answer: not modeled ({why or 'no profile'})"
    from hicache_ref.sim.price.spread import phrase

    what = "the best tier; none pays" if r.get("none_pays") else "the capacity to deploy"
    return phrase(r, f"L1 alone, at {tier[:2].upper()} {at:,} tokens ({what})")


def summary_l3_lines(r: dict) -> list[str]:
    gib = 2**30
    lines = [answer_line(r, "l3"), f"{r['requests']:,} requests, L1 {r['l1_tokens']:,}, L2 {r['l2_tokens']:,} tokens ({r['write_policy']}), "
             f"without L3: hit rate {r['without_l3_hit_rate']:.4f}",
             f"{'L3 tokens':>14} {'hit rate':>9} {'gain':>8} {'L3 read GiB':>12} {'L3 written GiB':>15} {'net s':>10}  {NET_HEAD}"]
    for t in r["tiers"]:
        net = t.get("net_benefit_seconds")
        lines.append(f"{t['l3_tokens']:>14,} {t['hit_rate']:>9.4f} {t['marginal_gain']:>+8.4f} "
                     f"{t['l3_bytes_read'] / gib:>12.2f} {t['l3_bytes_written'] / gib:>15.2f} "
                     + (f"{net:>+10.2f}" if net is not None else f"{'n/m':>10}") + net_interval(t))
    where = plateau_words(r, "L3", r["plateau_l3_tokens"], "the same L1 and L2 without L3")
    how = r["tiers"][0].get("net_benefit_reason", "") if r["tiers"] else ""
    return lines + [where, "net s: net benefit against HiCache off (L1 alone), n/m: not measured; first tier: " + how]


def run(a) -> int:
    trace = trace_arg(a.trace)
    spec = spec_from_args(a, "sweep")
    load_profile_arg("--profile", spec.profile)
    if a.l3_tokens is not None:
        return run_l3(a, spec, trace)
    if spec.storage.l3 is not None:
        raise CliError("--l3", "sweep L3 with --l3-tokens a,b,... (an L2 sweep runs without L3)")
    tiers = parse_tiers(a.l2_tokens, spec.page_size)
    out = output_folder("--out", a.out)
    l1 = spec.tiers.l1_tokens
    at_or_below = [t for t in tiers if l1 is not None and t <= l1]
    if at_or_below:  # an inclusive L2 no larger than L1 holds nothing L1 does not
        print(f"hicache: warning: --l2-tokens {', '.join(f'{t:,}' for t in at_or_below)}: not above --l1-tokens "
              f"{l1:,}; upstream refuses a host pool no larger than the device's (host <= device), so no SGLang "
              "server runs at that size, and under write_through such an L2 holds nothing L1 does not",
              file=sys.stderr, flush=True)
    replay_tier = engine_replay(a)
    if replay_tier is True:
        return EXIT_NOT_RUN
    try:
        result = sweep(spec, requests_of("--trace", trace, read_trace(trace, a.limit)), tiers, a.plateau_gain,
                       method=a.method, progress=bar("hicache sweep", a.quiet), replay_tier=replay_tier)
    except ValueError as e:
        if replay_tier is None:
            raise
        raise engine_error(a.engine, e) from None
    if replay_tier is not None:
        result.update(engine=a.engine, l1_alone_engine="reference")
    result.pop("wall_seconds")  # the JSON is reproducible: timings are printed, not stored
    result["trace"] = str(trace)
    from conformance.cli.plots import sweep_plot

    lines = sizing_lines(spec) + summary_lines(result)
    emit_result(result, out, "sweep", sweep_plot, a.json, lines, report=_page(out, result, lines))
    return 0


def engine_replay(a):
    """None for the reference; the chosen engine's tier replay; True when it cannot run here
    (NOT RUN printed). Refused before any work: another engine with a --method but replay."""
    if a.engine == "reference":
        return None
    from hicache_ref.engines import not_run_reason, replay_with

    if a.method != "replay":
        raise CliError("--engine", f"{a.engine} replays each tier: it needs --method replay (got {a.method})")
    why = not_run_reason(a.engine)
    if why is not None:
        print(f"hicache sweep: NOT RUN: engine {a.engine}: {why}", flush=True)
        return True
    return lambda spec, requests: replay_with(a.engine, spec, requests, off=False)  # priced against the sweep's L1-alone run


def plateau_words(r: dict, tier: str, at: int | None, against: str) -> str:
    """The plateau line of a sweep: none pays (every tier's net benefit a loss against `against`), L1
    alone (or no L3) already on the plateau, the plateau tier, or not yet on the plateau."""
    if r.get("none_pays"):
        # a tier's word is against L1 alone: it tells whether paying is sure only where that is `against`
        unsure = [t for t in r["tiers"] if t.get("answer") not in (None, "loss")] if tier == "L2" else []
        if unsure:  # a loss by the central value alone, inside the profile's own error
            return (f"no {tier} tier is a sure gain: none's central net benefit beats {against}, but "
                    f"{len(unsure)} of {len(r['tiers'])} tiers are {unsure[0]['answer']} within the profile's "
                    "uncertainty (their TTFT interval against L1 alone reaches a gain): the model cannot tell "
                    "whether it pays; measure the profile's assumed values on the node (hicache calibrate, "
                    "calibrate --prefill) to narrow them")
        return (f"no {tier} tier pays: every tier's net benefit is a loss against {against}, so there is no "
                f"plateau to deploy; leave {tier} {'off' if tier == 'L3' else 'and HiCache off'} at these sizes "
                "(hicache ablate prices the host fixes that may turn it)")
    basis = "" if all(t.get("net_benefit_seconds") is not None for t in r["tiers"]) else \
        " (by hit rate alone: net benefit not modeled)"
    if r["on_plateau"] and not at:
        first = "without L3" if tier == "L3" else "L1 alone"
        return f"{first} is already on the plateau: the first {tier} tier gains < {r['plateau_gain']} hit rate" + basis
    if r["on_plateau"]:
        return f"plateau at {tier} {at:,} tokens (next paying tier gains < {r['plateau_gain']})" + basis
    return f"not on the plateau yet: every paying tier gains >= {r['plateau_gain']}; largest {at:,}" + basis


def summary_lines(r: dict) -> list[str]:
    gib = 2**30
    lines = [answer_line(r, "l2"), f"{r['requests']:,} requests, L1 {r['l1_tokens']:,} tokens alone: hit rate {r['l1_alone_hit_rate']:.4f} "
             f"({r['method']}{'; ' + r['one_pass_refusal'] if r['method'] == 'replay' and r['one_pass_refusal'] else ''})",
             f"{'L2 tokens':>14} {'hit rate':>9} {'gain':>8} {'D2H GiB':>9} {'H2D GiB':>9} {'registered GiB':>15} "
             f"{'net s':>10}  {NET_HEAD}"]
    for t in r["tiers"]:
        net = t.get("net_benefit_seconds")
        lines.append(f"{t['l2_tokens']:>14,} {t['hit_rate']:>9.4f} {t['marginal_gain']:>+8.4f} "
                     f"{t['d2h_bytes'] / gib:>9.2f} {t['h2d_bytes'] / gib:>9.2f} {t['registered_bytes'] / gib:>15.2f} "
                     + (f"{net:>+10.2f}" if net is not None else f"{'n/m':>10}") + net_interval(t))
    where = plateau_words(r, "L2", r["plateau_l2_tokens"], "HiCache off (L1 alone)")
    later = [t for t in r["tiers"] if r["on_plateau"] and r["plateau_l2_tokens"] is not None
             and t["l2_tokens"] > r["plateau_l2_tokens"] and t["marginal_gain"] >= r["plateau_gain"]]
    if later:  # the rule stops at the first flat step; say when the curve rises again after it
        rises = ", ".join(f"{t['marginal_gain']:+.4f} at {t['l2_tokens']:,}" for t in later)
        where += f"; but later tiers gain again ({rises}): the curve is not flat past that step, look at the tiers above it"
    # The reason text is the first tier's (its figures quoted); the column has every tier's.
    how = r["tiers"][0]["net_benefit_reason"] if r["tiers"] else ""
    return lines + [where, "net s: net benefit against HiCache off (L1 alone), n/m: not measured; first tier: " + how]
