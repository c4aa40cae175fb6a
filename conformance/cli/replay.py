"""`hicache replay`: a Mooncake trace through the reference HiCache; hit rate and transfer figures.

Parse, build the spec (its options come from the spec's fields: conformance.common.spec_options),
run it on the engine --engine names (hicache_ref.engines: the reference's run_replay, serial,
served or TP as the spec says, or SGLang's own HiCache), print. An engine that cannot run here
prints NOT RUN with the reason and exits 3 (the project's not-run code).
"""

from __future__ import annotations

import sys

from conformance.common import args as types
from conformance.common.errors import EXIT_NOT_RUN, CliError, clip_path, engine_error
from conformance.common.inputs import load_profile_arg, output_folder, trace_file
from conformance.common.outputs import json_text
from conformance.common.progress import ticker
from conformance.common.spec_options import add_local, add_spec_options, sizing_lines, spec_from_args
from hicache_ref.engines import EngineNotRun, replay_with
from hicache_ref.sim.run.serial_replay import summary_lines
from hicache_ref.sim.run.tp_replay import tp_summary_line
from hicache_ref.sim.trace.reader import find_trace

HELP = "replay a Mooncake JSONL trace through the reference HiCache (L1 device, L2 host) and report hits and transfers"
LOCAL_OPTIONS = ("--trace", "--limit", "--engine", "--out", "--json", "--quiet")  # the rest are spec fields


def add_arguments(p) -> None:
    add_local(p, "--trace")
    add_local(p, "--limit", type=types.count(0))
    add_local(p, "--engine")
    add_spec_options(p, "replay")
    add_local(p, "--out", help="directory for replay.json and report.html")
    add_local(p, "--json")
    add_local(p, "--quiet")


def trace_arg(text: str | None):
    """--trace, or the packaged conversation trace; refused naming the option."""
    trace = text or find_trace("conversation_trace.jsonl")
    if trace is None:
        raise CliError("--trace", "not given and no conversation_trace.jsonl found (neither in $HICACHE_TRACES "
                                  "nor packaged: reinstall the package or pass --trace PATH)")
    return trace_file("--trace", trace)


def warn(message: str) -> None:
    print(f"hicache: warning: {message}", file=sys.stderr, flush=True)


def run(a) -> int:
    out = output_folder("--out", a.out)  # a file or a link there: refused before the run
    trace = trace_arg(a.trace)
    spec = spec_from_args(a, "replay")
    load_profile_arg("--profile", spec.profile)
    t = spec.tiers
    if spec.effective_host_layout != t.host_layout:  # upstream warns about the same switch
        warn(f"--host-layout {t.host_layout} is used as {spec.effective_host_layout} with --io-backend "
             f"{t.io_backend} (as upstream does); --io-backend kernel keeps {t.host_layout}")
    try:
        with ticker("hicache replay", a.quiet):
            fig = replay_with(a.engine, spec, trace, a.limit)
    except EngineNotRun as e:
        print(f"hicache replay: NOT RUN: {e}", flush=True)
        return EXIT_NOT_RUN
    except ValueError as e:
        if a.engine == "reference":
            raise
        raise engine_error(a.engine, e) from None
    except UnicodeDecodeError as e:
        raise CliError("--trace", f"{clip_path(trace)}: not UTF-8 text (byte {e.start} of a line)") from None
    fig["trace"] = str(trace)
    lines = sizing_lines(spec) + summary_lines(fig) + ([tp_summary_line(fig)] if spec.tp.ranks is not None else [])
    if out is not None:
        from conformance.common.safe_write import check_targets, write_text
        from conformance.report.team_results import replay_page

        page = replay_page(fig, lines)
        out.mkdir(parents=True, exist_ok=True)
        check_targets([out / "replay.json", out / "report.html"])  # both, before the first is written
        write_text(out / "replay.json", json_text(fig, indent=2) + "\n")
        write_text(out / "report.html", page)
    print(json_text(fig, indent=2) if a.json else "\n".join(lines))
    if not fig["requests"]:
        warn(f"--trace {clip_path(trace)}: no request replayed (empty trace or --limit 0); every figure is zero")
    elif fig["truncated_requests"]:
        warn(f"{fig['truncated_requests']:,} of {fig['requests']:,} requests did not fit in L1 (--l1-tokens) "
             "and were cut to what fits; their hits and transfers are partial")
    from hicache_ref.sim.sweep.sweep_l3 import starved_l3_warning

    if fig["requests"] and (starved := starved_l3_warning(spec, fig["input_tokens"], fig.get("l3_hit_tokens"))):
        warn(starved)
    if fig.get("l3_full_pages"):
        warn(f"--l3: the store had no room for {fig['l3_full_pages']:,} pages (not stored, so no later request "
             "hits them; Mooncake evicts only objects untouched for a few seconds): give it more room, e.g. "
             "segment=SIZE on a mooncake spec (default 256 MiB)")
    return 1 if fig["kv_mismatch_tokens"] else 0
