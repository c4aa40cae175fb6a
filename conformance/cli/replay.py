"""`hicache replay`: a Mooncake trace through the reference HiCache; hit rate and transfer figures."""

from __future__ import annotations

import json
import sys

from conformance.cli import args as types
from conformance.cli import reqpath_args
from conformance.cli.budget import refuse_over
from conformance.cli.errors import CliError, clip, clip_path
from conformance.cli.inputs import load_profile_arg, text_file
from conformance.cli.progress import ticker
from hal.transfer.layouts import DTYPES, HOST_LAYOUTS
from hal.units import HELP as UNITS
from hal.units import parse_size
from hicache_ref.policy import POLICIES
from hicache_ref.replay import replay, summary_lines
from hicache_ref.spec import CacheSpec
from hicache_ref.tp.replay_tp import tp_replay, tp_spec, tp_summary_line
from hicache_ref.trace import find_trace

DEFAULTS = CacheSpec()  # the seed geometry and the spec's policies
HELP = "replay a Mooncake JSONL trace through the reference HiCache (L1 device, L2 host) and report hits and transfers"


def add_arguments(p) -> None:
    p.add_argument("--trace", help="Mooncake JSONL trace, .jsonl or .jsonl.gz (default: the packaged "
                   "conversation_trace.jsonl.gz)")
    p.add_argument("--page-size", type=types.page_size, default=DEFAULTS.page_size,
                   help=f"tokens per page (at most {types.MAX_PAGE_SIZE:,})")
    p.add_argument("--l1-tokens", help=f"device (L1) capacity in tokens, e.g. 2M (2,000,000; {UNITS}); "
                   "omitted: unlimited")
    p.add_argument("--l2-tokens", help=f"host (L2) capacity in tokens ({UNITS}); 0: no L2; omitted: unlimited")
    p.add_argument("--write-policy", default=DEFAULTS.write_policy, choices=POLICIES)
    p.add_argument("--ghost", action="store_true", help="back up prefixes proven reused by a ghost list of L1 evictions")
    p.add_argument("--ghost-entries", type=types.size(),
                   help=f"with --ghost: ghost list bound ({UNITS} ; default: L1 pages, at least 1024)")
    p.add_argument("--free-list", default=DEFAULTS.free_list, choices=("fifo", "lifo"))
    p.add_argument("--limit", type=types.count(0), help="replay only the first N requests")
    p.add_argument("--materialize", action="store_true", help="real KV pools and bytes; every hit checked bit for bit")
    p.add_argument("--attention", default=DEFAULTS.attention, choices=("mla", "mha"))
    p.add_argument("--layers", type=types.layers, default=DEFAULTS.layers, help=f"at most {types.MAX_LAYERS:,}")
    p.add_argument("--kv-dim", type=types.dim, default=DEFAULTS.kv_dim, help="MLA latent width, or the head dim with --attention mha")
    p.add_argument("--heads", type=types.heads, default=DEFAULTS.heads, help="KV heads (MHA)")
    p.add_argument("--dtype", default=DEFAULTS.dtype, choices=tuple(DTYPES))
    p.add_argument("--host-layout", default=DEFAULTS.host_layout, choices=HOST_LAYOUTS)
    p.add_argument("--profile", default=DEFAULTS.profile, help="hardware profile for the modeled clock (name or YAML path)")
    p.add_argument("--tp", type=types.count(1, 1024), help="TP ranks sharing the trace (figures for the group)")
    p.add_argument("--shared-host", action="store_true", help="with --tp: one host KV copy for the group (effective "
                   "L2 N x --l2-tokens, only rank 0 writes)")
    p.add_argument("--concurrency", type=types.count(1, 100_000), help="serve up to N requests at once, each "
                   "holding its KV in L1 until its output_length decode steps end (default: serial replay)")
    p.add_argument("--timestamps", action="store_true", help="with --concurrency: admit requests at the trace's "
                   "arrival times (decode steps of --step-ms)")
    p.add_argument("--pd", action="store_true", help="with --concurrency: PD disaggregation, prefill releases the "
                   "KV right after its transfer")
    p.add_argument("--step-ms", type=types.count(1, 60_000), default=30, help="with --concurrency: one decode "
                   "step, ms (the profiles hold no decode rate yet; default 30)")
    reqpath_args.add_arguments(p)  # request-path semantics: hit counting, PD inserts, load_back, sizing
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--quiet", action="store_true", help="no elapsed-time line on stderr (shown only on a terminal)")


# Per page of capacity the reference keeps an allocator slot and tree bookkeeping, allocated
# up front for the whole capacity (measured: 8 bytes per page per tier, peak RSS).
PAGE_BOOKKEEPING_BYTES = 8


def _tokens_arg(name: str, text: str | None, page_size: int = 1) -> int | None:
    """A capacity in tokens: 0 (no tier, L2 only) or at least one whole page."""
    if text is None:
        return None
    tokens = parse_size(text, name=name)
    if 0 < tokens < page_size or (name == "--l1-tokens" and tokens == 0):
        raise CliError(name, f"{clip(text)} tokens hold no whole page of --page-size {page_size}"
                             + ("; give 0 for no L2" if name == "--l2-tokens" else ""))
    return tokens


def spec_from_args(a, l1: int | None, l2: int | None) -> CacheSpec:
    """The CacheSpec the command line describes (capacities already parsed)."""
    return CacheSpec(page_size=a.page_size, l1_tokens=l1, l2_tokens=l2, write_policy=a.write_policy, ghost=a.ghost,
                     ghost_entries=a.ghost_entries, free_list=a.free_list, host_layout=a.host_layout,
                     attention=a.attention, layers=a.layers, heads=a.heads, kv_dim=a.kv_dim, dtype=a.dtype,
                     profile=a.profile, materialize=a.materialize, **reqpath_args.spec_fields(a))


def check_capacity(spec: CacheSpec) -> None:
    """Refuse, naming the option, capacities whose bookkeeping (and pools) cannot fit here."""
    geom = spec.geometry()
    l1, l2 = spec.l1_tokens, spec.l2_tokens
    for option, tokens in (("--l1-tokens", l1), ("--l2-tokens", l2)):
        if tokens is None:
            continue
        per_token = PAGE_BOOKKEEPING_BYTES / spec.page_size + (geom.token_bytes if spec.materialize else 0)
        what = "per-page bookkeeping" + (" and KV pool" if spec.materialize else "")
        refuse_over(option, tokens * per_token, f"{what} of {tokens:,} tokens")


def warn(message: str) -> None:
    print(f"hicache: warning: {message}", file=sys.stderr, flush=True)


def run(a) -> int:
    trace = a.trace or find_trace("conversation_trace.jsonl")
    if trace is None:
        raise CliError("--trace", "not given and no conversation_trace.jsonl found (neither in $HICACHE_TRACES "
                                  "nor packaged: reinstall the package or pass --trace PATH)")
    trace = text_file("--trace", trace, "a Mooncake JSONL trace")
    if a.ghost_entries is not None and not a.ghost:
        raise CliError("--ghost-entries", "bounds the ghost list, which only --ghost turns on")
    if a.attention == "mla" and a.heads != 1:
        raise CliError("--heads", f"MLA keeps one latent KV head, got {a.heads}; --heads is for --attention mha")
    load_profile_arg("--profile", a.profile)
    l1 = _tokens_arg("--l1-tokens", a.l1_tokens, a.page_size)
    l2 = _tokens_arg("--l2-tokens", a.l2_tokens, a.page_size)
    if a.shared_host and a.tp is None:
        raise CliError("--shared-host", "shares one host pool among the ranks of --tp N; give --tp")
    spec = spec_from_args(a, l1, l2)
    check_capacity(spec if a.tp is None else tp_spec(spec, a.tp, a.shared_host))
    if a.concurrency is None and (a.timestamps or a.pd):
        raise CliError("--timestamps" if a.timestamps else "--pd", "applies to a served replay: give --concurrency N")
    if a.concurrency is not None and a.tp is not None:
        raise CliError("--tp", "applies to a serial replay (one rank stands for the group); drop --concurrency")
    try:
        with ticker("hicache replay", a.quiet):
            if a.tp is not None:
                fig = tp_replay(spec, trace, a.limit, a.tp, a.shared_host)
            elif a.concurrency is None:
                fig = replay(spec, trace, a.limit)
            else:
                from hicache_ref.trace import read_trace
                from hicache_ref.workload.serving import replay_served

                fig = replay_served(spec, read_trace(trace, a.limit), a.concurrency, timestamps=a.timestamps,
                                    pd=a.pd, step_seconds=a.step_ms / 1000)
    except UnicodeDecodeError as e:
        raise CliError("--trace", f"{clip_path(trace)}: not UTF-8 text (byte {e.start} of a line)") from None
    fig["trace"] = str(trace)
    if a.json:
        print(json.dumps(fig, indent=2))
    else:
        print("\n".join(summary_lines(fig) + ([tp_summary_line(fig)] if a.tp is not None else [])))
    if not fig["requests"]:
        warn(f"--trace {clip_path(trace)}: no request replayed (empty trace or --limit 0); every figure is zero")
    elif fig["truncated_requests"]:
        warn(f"{fig['truncated_requests']:,} of {fig['requests']:,} requests did not fit in L1 (--l1-tokens) "
             "and were cut to what fits; their hits and transfers are partial")
    return 1 if fig["kv_mismatch_tokens"] else 0
