"""`hicache replay`: a Mooncake trace through the reference HiCache; hit rate and transfer figures."""

from __future__ import annotations

import json

from hal.transfer.layouts import DTYPES, HOST_LAYOUTS
from hal.units import HELP as UNITS
from hal.units import parse_size
from hicache_ref.policy import POLICIES
from hicache_ref.replay import replay, summary_lines
from hicache_ref.spec import CacheSpec
from hicache_ref.trace import find_trace

DEFAULTS = CacheSpec()  # the seed geometry and the spec's policies
HELP = "replay a Mooncake JSONL trace through the reference HiCache (L1 device, L2 host) and report hits and transfers"


def add_arguments(p) -> None:
    p.add_argument("--trace", help="Mooncake JSONL trace, .jsonl or .jsonl.gz (default: the packaged "
                   "conversation_trace.jsonl.gz)")
    p.add_argument("--page-size", type=int, default=DEFAULTS.page_size)
    p.add_argument("--l1-tokens", help=f"device (L1) capacity in tokens, e.g. 2M (2,000,000; {UNITS}); "
                   "omitted: unlimited")
    p.add_argument("--l2-tokens", help=f"host (L2) capacity in tokens ({UNITS}); 0: no L2; omitted: unlimited")
    p.add_argument("--write-policy", default=DEFAULTS.write_policy, choices=POLICIES)
    p.add_argument("--ghost", action="store_true", help="back up prefixes proven reused by a ghost list of L1 evictions")
    p.add_argument("--ghost-entries", type=int, help="ghost list bound (default: L1 pages, at least 1024)")
    p.add_argument("--free-list", default=DEFAULTS.free_list, choices=("fifo", "lifo"))
    p.add_argument("--limit", type=int, help="replay only the first N requests")
    p.add_argument("--materialize", action="store_true", help="real KV pools and bytes; every hit checked bit for bit")
    p.add_argument("--attention", default=DEFAULTS.attention, choices=("mla", "mha"))
    p.add_argument("--layers", type=int, default=DEFAULTS.layers)
    p.add_argument("--kv-dim", type=int, default=DEFAULTS.kv_dim, help="MLA latent width, or the head dim with --attention mha")
    p.add_argument("--heads", type=int, default=DEFAULTS.heads, help="KV heads (MHA)")
    p.add_argument("--dtype", default=DEFAULTS.dtype, choices=tuple(DTYPES))
    p.add_argument("--host-layout", default=DEFAULTS.host_layout, choices=HOST_LAYOUTS)
    p.add_argument("--profile", default=DEFAULTS.profile, help="hardware profile for the modeled clock (name or YAML path)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")


def _tokens_arg(name: str, text: str | None) -> int | None:
    return None if text is None else parse_size(text, name=name)


def spec_from_args(a) -> CacheSpec:
    """The CacheSpec the command line describes."""
    return CacheSpec(page_size=a.page_size, l1_tokens=_tokens_arg("--l1-tokens", a.l1_tokens),
                     l2_tokens=_tokens_arg("--l2-tokens", a.l2_tokens), write_policy=a.write_policy, ghost=a.ghost,
                     ghost_entries=a.ghost_entries, free_list=a.free_list, host_layout=a.host_layout,
                     attention=a.attention, layers=a.layers, heads=a.heads, kv_dim=a.kv_dim, dtype=a.dtype,
                     profile=a.profile, materialize=a.materialize)


def run(a) -> int:
    trace = a.trace or find_trace("conversation_trace.jsonl")
    if trace is None:
        raise ValueError("--trace: not given and no conversation_trace.jsonl found (neither in $HICACHE_TRACES "
                         "nor packaged: reinstall the package or pass --trace PATH)")
    if a.limit is not None and a.limit < 0:
        raise ValueError(f"--limit: must be non-negative, got {a.limit}")
    fig = replay(spec_from_args(a), trace, a.limit)
    fig["trace"] = str(trace)
    if a.json:
        print(json.dumps(fig, indent=2))
    else:
        print("\n".join(summary_lines(fig)))
    return 1 if fig["kv_mismatch_tokens"] else 0
