"""`hicache trace stats|synth|convert|gsp`: what a Mooncake trace asks of a cache, synthetic ones shaped like
yours, and traces in other formats converted (conformance.cli.trace_convert)."""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.cli.trace_convert import add_parsers
from conformance.common import args as types
from conformance.common.errors import CliError, clip_path
from conformance.common.inputs import new_file, requests_of, trace_file
from conformance.common.outputs import json_text
from conformance.common.safe_write import atomic_file
from conformance.common.spec_options import add_spec_options
from hal.common.units import HELP as UNITS
from hal.common.units import parse_size
from hicache_ref.sim.trace.reader import read_trace
from hicache_ref.sim.trace.stats import FITS_IN_L1, prefix_reuse_tokens, trace_stats
from hicache_ref.sim.trace.synth import global_share, synthesize_trace, write_trace

HELP = "trace statistics (reuse rate, reuse distances, pressure on the tiers), synthetic and converted Mooncake traces"
REUSE_TOLERANCE = 0.02  # synth warns when the trace it wrote misses --reuse by more


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="trace_command", required=True)
    s = sub.add_parser("stats", help="requests, lengths, prefix reuse rate, unlimited hit rate, reuse distances",
                       description="Figures of a Mooncake JSONL trace (definitions: hicache_ref/README.md, \"Traces\"); "
                                   "with --l1-tokens, the hit rate an L1 of that many tokens alone gets (LRU, one pass).")
    s.add_argument("path", help="Mooncake JSONL trace (.jsonl or .jsonl.gz)")
    add_spec_options(s, "trace stats", filled=True)  # --page-size and --l1-tokens as every command spells them
    s.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    s.add_argument("--plot", help="also write a PNG: length histogram and hit rate vs LRU capacity")
    s.set_defaults(_trace_run=_stats)
    y = sub.add_parser("synth", help="write a synthetic Mooncake trace with a given prefix reuse rate",
                       description="Multi-turn conversations opening with one global prefix, interleaved, with arrival "
                                   "times; deterministic for a seed (rules: hicache_ref/README.md, \"Traces\").")
    y.add_argument("--out", required=True, help="JSONL file to write")
    y.add_argument("--requests", type=types.count(1, 10_000_000), required=True, help="requests to write")
    y.add_argument("--min-tokens", required=True, help=f"shortest request, tokens ({UNITS})")
    y.add_argument("--max-tokens", required=True, help=f"longest request, tokens ({UNITS})")
    y.add_argument("--reuse", type=types.unit_interval("a fraction", top_open=True), required=True, help="prefix reuse rate in [0, 1)")
    y.add_argument("--sessions", type=types.count(1, 1_000_000), default=16,
                   help="conversations open at once; their turns interleave, so more of them put a "
                        "conversation's turns further apart in a cache")
    y.add_argument("--global-prefix-share", type=types.unit_interval("a fraction"), metavar="F",
                   help="of the reused tokens, the fraction in one global prefix every conversation opens "
                        "with (a system prompt and tools), the rest from each conversation's own history "
                        "(default: only as long as --reuse needs)")
    y.add_argument("--turns", type=types.count(1, 1_000_000), metavar="N",
                   help="a conversation ends after N turns and a new one opens (default: when its next turn "
                        "would pass --max-tokens)")
    y.add_argument("--think-time", type=types.positive_real("seconds"), metavar="SECONDS",
                   help="mean seconds (about +-50%%) a conversation waits before its next turn, while the "
                        "others speak; needs --rate (default: none, it may speak again at once)")
    y.add_argument("--long-pause-share", type=types.unit_interval("a fraction", top_open=True), metavar="F",
                   help="of the turns, the fraction after which a conversation pauses for --long-pause seconds "
                        "(a user back much later, an agent resuming a parked task): its slot opens another "
                        "conversation meanwhile, and its next turn reuses its history from far back, past an "
                        "L2 (default: none)")
    y.add_argument("--long-pause", type=types.positive_real("seconds"), metavar="SECONDS",
                   help="mean seconds (about +-25%%) of a long pause; with --long-pause-share, needs --rate")
    y.add_argument("--rate", type=types.positive_real("requests per second", minimum=1e-6),  # a slower trace's times outgrow what a reader takes
                   help="arrivals per second (Poisson); omitted: all at time 0")
    y.add_argument("--seed", type=types.count(0), default=0, help="the same seed writes the same trace")
    y.add_argument("--json", action="store_true", help="print what was written as one JSON object")
    y.set_defaults(_trace_run=_synth)
    add_parsers(sub)


def run(a) -> int:
    return a._trace_run(a)


def _stats(a) -> int:
    path = trace_file("path", a.path)
    if a.plot is not None:
        new_file("--plot", a.plot)
        if Path(a.plot).suffix.lower() != ".png":  # checked before the work, not by matplotlib after it
            raise CliError("--plot", f"{clip_path(Path(a.plot))}: the plot is a PNG: name it *.png")
    requests = requests_of("path", path, read_trace(path))
    if a.l2_tokens is not None and a.l1_tokens is None:
        raise CliError("--l2-tokens", "needs --l1-tokens: L2 pressure is against L1 + L2")
    stats = trace_stats(requests, a.page_size, l1_tokens=a.l1_tokens, l2_tokens=a.l2_tokens)
    stats["trace"] = str(path)
    if a.plot is not None:
        from conformance.cli.plots import trace_stats_plot

        trace_stats_plot(a.plot, stats, [r.input_length for r in requests])
    if a.json:
        print(json_text(stats, indent=2))
    else:
        print("\n".join(stats_lines(stats)))
    return 0


def stats_lines(s: dict) -> list[str]:
    """A human summary of trace_stats' figures."""
    il, rd = s["input_length"], s["reuse_distance_tokens"]
    fmt = lambda d: ", ".join(f"{k} {v:,}" for k, v in d.items() if k.startswith("p") and v is not None)  # noqa: E731
    return [f"requests {s['requests']:,}, input tokens {s['input_tokens']:,}, output tokens {s['output_tokens']:,}",
            f"input length: {fmt(il) or 'none'}",
            f"prefix reuse rate {s['prefix_reuse_rate']:.4f} (512-token blocks); unlimited hit rate "
            f"{s['unlimited_hit_rate']:.4f} (page {s['page_size']})",
            f"reuse distance (tokens) over {s['reused_pages']:,} reused pages: {fmt(rd) or 'none'}"] + (
        [] if s.get("l1_tokens") is None else
        [f"L1 alone of {s['l1_tokens']:,} tokens (LRU, whole pages): hit rate {s['l1_hit_rate']:.4f}"]) + \
        pressure_lines(s["pressure"])


def pressure_lines(p: dict) -> list[str]:
    """The working set against the tiers, and the fits-in-L1 word (trace_stats' `pressure`)."""
    line = f"block size {p['block_tokens']} tokens (hash_ids); working set {p['working_set_tokens']:,} tokens"
    if p.get("l1_tokens"):
        line += f" = {p['working_set_over_l1']:.2f} x L1"
    if p.get("l2_tokens") is not None and p.get("working_set_over_l1_l2") is not None:
        line += f", {p['working_set_over_l1_l2']:.2f} x L1 + L2 (hit rate with both {p['l1_l2_hit_rate']:.4f})"
    out = [line]
    if p.get("fits_in_l1"):
        out.append(FITS_IN_L1)
    elif p.get("fits_in_l1_l2"):
        out.append("fits in L1 + L2: an L2 of this size reaches every reuse the trace has")
    return out


def _synth(a) -> int:
    out = new_file("--out", a.out)
    lo = parse_size(a.min_tokens, name="--min-tokens", minimum=1)
    hi = parse_size(a.max_tokens, name="--max-tokens", minimum=1)
    if hi < lo:
        raise CliError("--max-tokens", f"{hi:,} is below --min-tokens {lo:,}")
    if a.think_time is not None and a.rate is None:
        raise CliError("--think-time", "needs --rate: think time is between arrivals in time")
    if a.long_pause_share and a.long_pause is None:
        raise CliError("--long-pause-share", "needs --long-pause (the pause's mean seconds)")
    if a.long_pause is not None and not a.long_pause_share:
        raise CliError("--long-pause", "needs --long-pause-share > 0 (the share of turns a long pause follows)")
    if a.long_pause is not None and a.rate is None:
        raise CliError("--long-pause", "needs --rate: a pause is between arrivals in time")
    trace = synthesize_trace(a.requests, lo, hi, a.reuse, sessions=a.sessions, rate=a.rate, seed=a.seed,
                             global_prefix_share=a.global_prefix_share, turns=a.turns, think_time=a.think_time,
                             long_pause_share=a.long_pause_share, long_pause=a.long_pause)
    requests = trace.requests
    with atomic_file(out, binary=True) as f:  # Ctrl-C or a full disk: no partial trace, any old one kept
        write_trace(f, requests, gz=out.name.endswith(".gz"))
    total = sum(r.input_length for r in requests)
    reused = prefix_reuse_tokens(requests)
    achieved = sum(reused) / total
    share = global_share(trace, reused)
    fig = dict(out=str(out), requests=len(requests), input_tokens=total, reuse_asked=a.reuse,
               prefix_reuse_rate=achieved, global_prefix_tokens=trace.global_prefix_tokens,
               global_prefix_share=share, global_prefix_share_asked=a.global_prefix_share, seed=a.seed,
               sessions=a.sessions, turns=a.turns, think_time=a.think_time, rate=a.rate,
               long_pause_share=a.long_pause_share, long_pause=a.long_pause)
    print(json_text(fig, indent=2) if a.json else
          f"wrote {len(requests):,} requests, {total:,} input tokens to {out}: prefix reuse rate {achieved:.4f} "
          f"(asked {a.reuse}); global prefix {trace.global_prefix_tokens:,} tokens, {share:.4f} of the reused")
    if abs(achieved - a.reuse) > REUSE_TOLERANCE:
        print(f"hicache: warning: --reuse {a.reuse}: reached {achieved:.4f}; requests of {lo:,}-{hi:,} tokens "
              "cannot carry that much of an earlier prefix (each turn adds new tokens and drops a partial "
              "block, a conversation's first turn reuses only the global prefix); give more turns per "
              "conversation (more --requests, fewer --sessions, no --turns), longer requests or a larger "
              "--global-prefix-share", file=sys.stderr)
    return 0
