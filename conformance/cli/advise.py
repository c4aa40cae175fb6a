"""`hicache advise`: on your trace, turn HiCache on or leave it off, with which SGLang 0.5.23 flags, how sure.

Parse, size the spec per profile (--model and the profile's HBM give L1, or --l1-tokens), call
hicache_ref.advise.advisor.advise, print the answer first, then the flags, the host settings, the
sizes with their arithmetic and the ranked alternatives; --out writes advise.json and report.html.
"""

from __future__ import annotations

import json
import sys

from conformance.cli.replay import trace_arg
from conformance.cli.sweep import PLATEAU_GAIN
from conformance.common import args as types
from conformance.common.errors import CliError
from conformance.common.inputs import load_profile_arg, output_folder, requests_of
from conformance.common.spec_options import add_local, add_spec_options, spec_from_args
from hicache_ref.sim.sweep.plateau import DEFAULT_PLATEAU_GAIN
from hicache_ref.sim.trace.reader import read_trace

HELP = "on a trace: turn HiCache on or leave it off, the SGLang 0.5.23 flags, the TTFT change and how sure"
LOCAL_OPTIONS = ("--scenario", "--trace", "--profile", "--limit", "--plateau-gain", "--host-gib", "--out", "--json",
                 "--quiet")
MAX_HOST_GIB = 1 << 20  # 1 PiB: past any node
SEMANTICS = "sglang-0.5.23"  # the release whose flags advise prints: its request path is what is replayed
MAX_PROFILES = 8
SHOWN_ALTERNATIVES = 8


def add_arguments(p) -> None:
    p.add_argument("--scenario", choices=("seed",), help="seed: the seed's scenario (its trace, TP, concurrency, "
                   "PD and L1 per hardware_profiles/readings/<profile>.yaml) instead of --trace")
    add_local(p, "--trace")
    p.add_argument("--profile", action="append", metavar="NAME|PATH",
                   help="hardware profile to price with (name or YAML path); repeat to compare side by side "
                        "(default: p800)")
    add_local(p, "--limit", type=types.count(1))
    add_local(p, "--plateau-gain", type=PLATEAU_GAIN, default=DEFAULT_PLATEAU_GAIN,
              help=f"a capacity tier gaining less hit rate than this is on the plateau (default {DEFAULT_PLATEAU_GAIN})")
    add_local(p, "--host-gib", type=types.positive_real("GiB of host memory", maximum=MAX_HOST_GIB, unit=" GiB"),
              action="append", metavar="GIB", help="host memory of one node in GiB: bounds the host pools advise "
              "tries; once for every profile, or once per --profile in its order (default: each profile's "
              "host.numa_nodes x host.memory_per_node_gib)")
    add_spec_options(p, "advise")
    add_local(p, "--out", help="directory for advise.json and report.html")
    add_local(p, "--json")
    add_local(p, "--quiet")


def _progress(quiet: bool):
    if quiet or not sys.stderr.isatty():
        return None

    def tick(n: int) -> None:
        sys.stderr.write(f"\rhicache advise: {n} replays run")
        sys.stderr.flush()
    return tick


def _inputs(a) -> tuple[list, list, str]:
    """([(profile, spec)], requests, trace name), every input checked before any replay."""
    names = a.profile or ["p800"]
    if len(names) > MAX_PROFILES:
        raise CliError("--profile", f"{len(names)} profiles; at most {MAX_PROFILES}")
    if a.host_gib is not None and len(a.host_gib) not in (1, len(names)):
        raise CliError("--host-gib", f"given {len(a.host_gib)} times for {len(names)} profile(s): give it once, "
                       "or once per --profile in its order")
    profiles = [load_profile_arg("--profile", n) for n in names]
    if a.scenario == "seed":
        return _seed(a, profiles)
    trace = trace_arg(a.trace)
    pairs = [(pr, spec_from_args(a, "advise", profile=n, semantics=SEMANTICS)) for pr, n in zip(profiles, names,
                                                                                                strict=True)]
    return pairs, requests_of("--trace", trace, read_trace(trace, a.limit)), str(trace)


def _seed(a, profiles) -> tuple[list, list, str]:
    from hardware_profiles.measured_readings import load_readings
    from hicache_ref.sim.ladder.seed_scenario import seed_base, seed_requests

    if a.trace is not None or a.limit is not None:
        raise CliError("--trace" if a.trace is not None else "--limit", "the seed scenario sets its own trace")
    pairs = []
    for pr in profiles:
        readings = load_readings(pr)
        if readings is None:
            raise CliError("--scenario", f"profile {pr.name} names no readings file (`readings:`): the seed "
                           "scenario is built from one")
        base = seed_base(readings, pr).replace(semantics=SEMANTICS, tp=readings.scenario["tp"])
        pairs.append((pr, base))
    return pairs, seed_requests(), "seed scenario"


def _host_gibs(a, n: int) -> list | None:
    """One --host-gib per profile: the one given for all, or each in --profile's order."""
    if a.host_gib is None:
        return None
    return a.host_gib * n if len(a.host_gib) == 1 else list(a.host_gib)


def run(a) -> int:
    out = output_folder("--out", a.out)  # a file, a link or a folder that cannot be written: refused before the run
    pairs, requests, trace = _inputs(a)
    from hicache_ref.advise.advisor import advise

    result = advise(pairs, requests, a.plateau_gain, progress=_progress(a.quiet), host_gib=_host_gibs(a, len(pairs)))
    if _progress(a.quiet) is not None:
        sys.stderr.write("\r\033[K")
    result["trace"] = trace
    if out is not None:
        from conformance.common.safe_write import check_targets, write_text
        from conformance.report.team_advise import advise_page

        page = advise_page(result)  # made before either file is written
        out.mkdir(parents=True, exist_ok=True)
        check_targets([out / "advise.json", out / "report.html"])  # both, before the first is written
        write_text(out / "advise.json", json.dumps(result, indent=2) + "\n")
        write_text(out / "report.html", page)
    print(json.dumps(result, indent=2) if a.json else "\n".join(summary_lines(result)))
    return 0


def _fmt(row: dict) -> str:
    if row["ttft_change_pct"] is None:
        return f"not priced: {row['unpriced']}"
    lo, hi = row["ttft_change_pct_interval"]
    a, b = row["net_benefit_seconds_interval"]
    return (f"TTFT {row['ttft_change_pct']:+.2f}% [{lo:+.2f}, {hi:+.2f}], net {row['net_benefit_seconds']:+,.2f} s "
            f"[{a:+,.2f}, {b:+,.2f}], hit rate {row['hit_rate']:.4f}: {row['answer']}")


def summary_lines(r: dict) -> list[str]:
    """The answer of each profile first, then its flags, host settings, sizes and alternatives."""
    lines = [p["headline"] for p in r["profiles"]]
    for p in r["profiles"]:
        lines += ["", f"== {p['profile']} (TP {p['tp']}, L1 {p['l1_tokens']:,} tokens per rank)"]
        if p["on"]:
            lines += ["SGLang 0.5.23 launch flags:", "  " + p["command"], "host settings:"]
            lines += [f"  - {s}" for s in p["host_settings"]]
            worth = [f"{h['step']} {h['ttft_change_pct']:+.2f}%" for h in p["host_ladder"] if h["ttft_change_pct"] is not None]
            if worth:
                lines.append("  the same configuration as the host fixes go on, TTFT against HiCache off: " + ", ".join(worth))
        else:
            lines.append(f"no flags: leave --enable-hierarchical-cache out ({p['reason']})")
        lines.append("sizes:")
        lines += [f"  {s}" for s in p["sizes"]]
        lines.append(f"ranked alternatives (of {len(p['ranked'])} tried; intervals: 5th-95th percentile over the "
                     "profile's ensemble, holding the central value):")
        lines += [f"  {i + 1}. {row['label']}: {_fmt(row)}" for i, row in enumerate(p["ranked"][:SHOWN_ALTERNATIVES])]
        if p.get("l3_not_priced"):
            lines.append(f"L3 not tried: {p['l3_not_priced']}")
    lines.append(f"{r['requests']:,} requests of {r['trace']}, {r['replays_run']} replays run")
    return lines
