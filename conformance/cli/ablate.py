"""`hicache ablate`: the seed's fix ladder over a trace, one row per fix, each on top of the previous."""

from __future__ import annotations

from pathlib import Path

from conformance.cli.replay import check_capacity
from conformance.cli.sweep import PLATEAU_GAIN
from conformance.common import args as types
from conformance.common.errors import CliError, clip_path
from conformance.common.inputs import load_profile_arg, page_tokens, text_file
from conformance.common.outputs import emit_result
from conformance.common.progress import bar
from hal.units import HELP as UNITS
from hicache_ref.sim.ablate import SWEEP_TIERS, ablate
from hicache_ref.sim.plateau import DEFAULT_PLATEAU_GAIN
from hicache_ref.sim.replay_tp import tp_spec
from hicache_ref.sim.trace import find_trace, read_trace
from hicache_ref.spec import CacheSpec

HELP = "the seed's fix ladder over a trace: hit rate, transfers, modeled TTFT change and net benefit per fix"
# Without --l1-tokens/--l2-tokens: L1 and L2 as these fractions of the trace's page-rounded tokens.
DEFAULT_L1_FRACTION, DEFAULT_L2_FRACTION = 16, 4


def add_arguments(p) -> None:
    p.add_argument("--trace", help="Mooncake JSONL trace (default: the packaged conversation trace)")
    p.add_argument("--profile", required=True, help="hardware profile (name or YAML path) whose figures price the rows")
    p.add_argument("--l1-tokens", help=f"device (L1) capacity per rank in tokens ({UNITS}); default: 1/"
                   f"{DEFAULT_L1_FRACTION} of the trace's tokens")
    p.add_argument("--l2-tokens", help=f"host (L2) capacity per rank in tokens ({UNITS}); default: 1/{DEFAULT_L2_FRACTION} "
                   "of the trace's tokens")
    p.add_argument("--concurrency", type=types.count(1, 100_000), help="serve up to N requests at once "
                   "(hicache replay --concurrency); default: serial replay")
    p.add_argument("--tp", type=types.count(1, 1024), help="ranks of the TP group for the tp_shared step "
                   "(default: the profile's device.devices_per_node, else 1)")
    p.add_argument("--plateau-gain", type=PLATEAU_GAIN, default=DEFAULT_PLATEAU_GAIN,
                   help=f"the capacity step's plateau threshold (default {DEFAULT_PLATEAU_GAIN})")
    p.add_argument("--page-size", type=types.page_size, default=64)
    p.add_argument("--limit", type=types.count(1), help="only the first N requests")
    p.add_argument("--out", help="directory for ablate.json and ablate.png")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr (shown only on a terminal)")


def _capacity(option: str, text: str | None, page_size: int) -> int | None:
    if text is None:
        return None
    return page_tokens(option, text, page_size)


def run(a) -> int:
    trace = a.trace or find_trace("conversation_trace.jsonl")
    if trace is None:
        raise CliError("--trace", "not given and no conversation_trace.jsonl found (pass --trace PATH)")
    trace = text_file("--trace", trace, "a Mooncake JSONL trace")
    profile = load_profile_arg("--profile", a.profile)
    l1 = _capacity("--l1-tokens", a.l1_tokens, a.page_size)
    l2 = _capacity("--l2-tokens", a.l2_tokens, a.page_size)
    tp = a.tp if a.tp is not None else (profile.device.devices_per_node or 1)
    out = Path(a.out) if a.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise CliError("--out", f"{clip_path(out)}: exists and is not a directory")
    # the largest cache the ladder builds: TP-shared, L2 = ranks x per-rank L2 (before the trace is read)
    if l1 is not None or l2 is not None:
        check_capacity(tp_spec(CacheSpec(page_size=a.page_size, l1_tokens=l1, l2_tokens=l2), tp, True))
    requests = read_trace(trace, a.limit)
    whole = sum(-(-r.input_length // a.page_size) * a.page_size for r in requests)
    l1 = l1 if l1 is not None else max(whole // DEFAULT_L1_FRACTION, a.page_size)
    l2 = l2 if l2 is not None else max(whole // DEFAULT_L2_FRACTION, a.page_size)
    if l2 < SWEEP_TIERS * tp * a.page_size:
        raise CliError("--l2-tokens", f"{l2:,} tokens is below the capacity sweep's {SWEEP_TIERS} tiers of "
                                      f"{tp} ranks x --page-size {a.page_size} ({SWEEP_TIERS * tp * a.page_size:,})")
    spec = CacheSpec(page_size=a.page_size, l1_tokens=l1, l2_tokens=l2, profile=a.profile)
    check_capacity(tp_spec(spec, tp, True))
    result = ablate(spec, requests, concurrency=a.concurrency, tp=tp, plateau_gain=a.plateau_gain,
                    progress=bar("hicache ablate", a.quiet, " replays"))
    result["configuration"]["trace"] = str(trace)
    from conformance.cli.plots import ablate_plot

    emit_result(result, out, "ablate", ablate_plot, a.json, table_lines(result))
    return 0


def _num(v, fmt: str) -> str:
    return "n/m" if v is None else format(v, fmt)


def table_lines(r: dict) -> list[str]:
    c = r["configuration"]
    gib = 2**30
    served = "serial" if c["concurrency"] is None else f"concurrency {c['concurrency']}"
    lines = [f"{c['requests']:,} requests, profile {c['profile']}, TP {c['tp']}, L1 {c['l1_tokens']:,} / L2 "
             f"{c['l2_tokens']:,} tokens per rank, {served}",
             f"{'step':<17} {'hit rate':>8} {'D2H seg':>9} {'H2D seg':>9} {'D2H GiB':>8} {'H2D GiB':>8} "
             f"{'xfer s':>9} {'TTFT chg s':>11} {'net s':>11}"]
    for s in r["steps"]:
        lines.append(f"{s['step']:<17} {_num(s['hit_rate'], '.4f'):>8} {_num(s['d2h_segments'], ','):>9} "
                     f"{_num(s['h2d_segments'], ','):>9} "
                     f"{_num(None if s['d2h_bytes'] is None else s['d2h_bytes'] / gib, '.2f'):>8} "
                     f"{_num(None if s['h2d_bytes'] is None else s['h2d_bytes'] / gib, '.2f'):>8} "
                     f"{_num(s['modeled_transfer_seconds'], '.3f'):>9} {_num(s['ttft_change_seconds'], '+.4f'):>11} "
                     f"{_num(s['net_benefit_seconds'], '+.2f'):>11}")
    lines.append("n/m: not measured:")
    for s in r["steps"]:
        reasons = sorted(set(s["not_measured"].values()))
        lines += [f"  {s['step']}: {why}" for why in reasons]
    lines += [f"note, {s['step']}: {n}" for s in r["steps"] for n in s["notes"]]
    assumed = sorted({k for s in r["steps"] for k in s["assumed_inputs"]})
    if assumed:
        lines.append(f"assumed profile inputs: {', '.join(assumed)}")
    return lines
