"""`hicache replay`: a Mooncake trace through the reference HiCache; hit rate and transfer figures."""

from __future__ import annotations

import dataclasses
import json
import sys

from conformance.cli import reqpath_args
from conformance.cli.budget import refuse_over
from conformance.common import args as types
from conformance.common.errors import CliError, clip, clip_path
from conformance.common.inputs import load_profile_arg, text_file
from conformance.common.progress import ticker
from hal.transfer.io_backend import IO_BACKENDS
from hal.transfer.layouts import DTYPES, HOST_LAYOUTS
from hal.units import HELP as UNITS
from hal.units import parse_size
from hicache_ref.core.allocator import ORDERS
from hicache_ref.core.policy import POLICIES
from hicache_ref.l3 import PREFETCH_POLICIES
from hicache_ref.sim.replay import replay, summary_lines
from hicache_ref.sim.replay_tp import tp_replay, tp_spec, tp_summary_line
from hicache_ref.sim.trace import find_trace
from hicache_ref.spec import CacheSpec
from hicache_ref.storage.registry import split_spec, storage_class

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
    p.add_argument("--free-list", choices=ORDERS,
                   help="device (L1) free-list order (hicache_ref.core.allocator; default: the --semantics preset's, "
                   "fifo for reference, upstream_l1 for upstream)")
    p.add_argument("--limit", type=types.count(0), help="replay only the first N requests")
    p.add_argument("--materialize", action="store_true", help="real KV pools and bytes; every hit checked bit for bit")
    p.add_argument("--attention", default=DEFAULTS.attention, choices=("mla", "mha"))
    p.add_argument("--layers", type=types.layers, default=DEFAULTS.layers, help=f"at most {types.MAX_LAYERS:,}")
    p.add_argument("--kv-dim", type=types.dim, default=None, help="MLA latent width, or the head dim with "
                   f"--attention mha (default {DEFAULTS.kv_dim})")
    p.add_argument("--head-dim", type=types.dim, help="with --attention mha: an alias of --kv-dim (plan's name)")
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
                   "KV right after its transfer (when requests leave the node; --pd-disagg is how the tree "
                   "inserts and counts them: both together model a PD prefill node)")
    p.add_argument("--step-ms", type=types.decimal(60_000, " ms"), default=30, help="with --concurrency: one "
                   "decode step, ms, a positive decimal such as 30 or 2.5 (the profiles hold no decode rate yet; default 30)")
    reqpath_args.add_arguments(p)  # request-path semantics: hit counting, PD inserts, load_back, sizing
    # -- upstream fidelity (issue 11 sections 1-2) --
    p.add_argument("--host-free-list", choices=ORDERS, help="host (L2) free-list order (default: the preset's, "
                   "--free-list's for reference, upstream_host for upstream)")
    p.add_argument("--io-backend", choices=IO_BACKENDS, help="how host KV moves: "
                   "direct (one copy per merged run; layer_first host indices sorted, page_first used as "
                   "page_first_direct) or kernel (launches and per-item copies, no descriptors); default: the preset's, "
                   "direct for reference, kernel (upstream's server default) for upstream")
    # L3 (hicache_ref.l3): one block
    p.add_argument("--l3", metavar="SPEC", help="L3 store under L2: file:DIR[,max_bytes=SIZE], "
                   "mooncake:METADATA_URL,MASTER_ADDR, mooncake:auto (a loopback cluster of its own) or "
                   "memory:[max_bytes=SIZE] (needs --materialize and an L2); adds l3_* figures")
    p.add_argument("--prefetch-policy", choices=tuple(PREFETCH_POLICIES), help="with --l3: when a request stops "
                   f"waiting for its prefetch (default {DEFAULTS.prefetch_policy}; best_effort fetches only within "
                   "--prefetch-slack-ms)")
    p.add_argument("--prefetch-threshold", type=types.count(0), help="with --l3: fewer L3 tokens than this are "
                   f"not prefetched (default {DEFAULTS.prefetch_threshold})")
    p.add_argument("--prefetch-slack-ms", type=types.count(0, 3_600_000), help="with --l3: modeled queue time "
                   "a request has before it is scheduled (default 0: serial replay)")
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
                     ghost_entries=a.ghost_entries, host_layout=a.host_layout,
                     attention=a.attention, layers=a.layers, heads=a.heads, kv_dim=a.kv_dim, dtype=a.dtype,
                     profile=a.profile, materialize=a.materialize, **reqpath_args.spec_fields(a))


def _with_l3(a, spec: CacheSpec) -> CacheSpec:
    """The spec with the --l3 options, checked naming the option."""
    if a.l3 is None:
        for option in ("prefetch_policy", "prefetch_threshold", "prefetch_slack_ms"):
            if getattr(a, option) is not None:
                raise CliError("--" + option.replace("_", "-"), "applies to an L3: give --l3 SPEC")
        return spec
    if not a.materialize:
        raise CliError("--l3", "needs --materialize (L3 stores and returns real KV bytes)")
    if spec.l2_tokens == 0:
        raise CliError("--l3", "needs an L2 to prefetch into; --l2-tokens is 0")
    if a.tp is not None or a.concurrency is not None:
        raise CliError("--l3", "applies to a serial single-rank replay; drop " + ("--tp" if a.tp else "--concurrency"))
    try:
        storage_class(split_spec(a.l3)[0])
    except ValueError as e:
        raise CliError("--l3", str(e)) from None
    options = dict(l3=a.l3, prefetch_policy=a.prefetch_policy or spec.prefetch_policy,
                   prefetch_threshold=spec.prefetch_threshold if a.prefetch_threshold is None else a.prefetch_threshold,
                   prefetch_slack_seconds=(a.prefetch_slack_ms or 0) / 1000)
    return dataclasses.replace(spec, **options)


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


def _head_dim(a) -> int:
    """--kv-dim, or --head-dim (its MHA alias, plan's name for it), or the default."""
    if a.head_dim is None:
        return DEFAULTS.kv_dim if a.kv_dim is None else a.kv_dim
    if a.attention != "mha":
        raise CliError("--head-dim", "is for --attention mha; MLA's latent width is --kv-dim")
    if a.kv_dim is not None:
        raise CliError("--head-dim", "an alias of --kv-dim: give one of them")
    return a.head_dim


def run(a) -> int:
    a.kv_dim = _head_dim(a)
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
    l2, host_sizing = reqpath_args.size_host(a, l1, l2)  # --hicache-ratio / --hicache-size
    if a.shared_host and a.tp is None:
        raise CliError("--shared-host", "shares one host pool among the ranks of --tp N; give --tp")
    spec = spec_from_args(a, l1, l2)
    if spec.effective_host_layout != spec.host_layout:  # upstream warns about the same switch
        warn(f"--host-layout {spec.host_layout} is used as {spec.effective_host_layout} with --io-backend "
             f"{spec.io_backend} (as upstream does); --io-backend kernel keeps {spec.host_layout}")
    spec = _with_l3(a, spec)
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
                try:
                    fig = replay(spec, trace, a.limit)
                except ValueError as e:
                    if str(e).startswith("l3: "):  # the store could not be opened (hicache_ref.l3.build)
                        raise CliError("--l3", str(e).removeprefix("l3: ")) from None
                    raise
            else:
                from hicache_ref.sim.serving import replay_served
                from hicache_ref.sim.trace import read_trace

                # arrival times only mean something in time order: --timestamps refuses a line going back
                fig = replay_served(spec, read_trace(trace, a.limit, ordered=a.timestamps), a.concurrency,
                                    timestamps=a.timestamps, pd=a.pd, step_seconds=a.step_ms / 1000)
    except UnicodeDecodeError as e:
        raise CliError("--trace", f"{clip_path(trace)}: not UTF-8 text (byte {e.start} of a line)") from None
    fig["trace"] = str(trace)
    if host_sizing is not None:
        fig["host_sizing"] = host_sizing
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
