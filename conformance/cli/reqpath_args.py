"""`hicache replay`'s request-path options: upstream semantics vs the reference's, and host sizing.

One block of options that conformance.cli.replay adds and turns into CacheSpec fields:
`--semantics` picks a preset (hicache_ref.semantics) and each switch given explicitly
overrides it; `--hicache-ratio` / `--hicache-size` size L2 as upstream does
(hicache_ref.sizing). The differences they select are listed in hicache_ref/README.md.
"""

from __future__ import annotations

import argparse

from conformance.common import args as types
from conformance.common.errors import CliError, clip
from hal.transfer.layouts import KVGeometry, parse_dtype
from hal.units import parse_size
from hicache_ref import sizing
from hicache_ref.core.policy import HIT_COUNTS
from hicache_ref.core.radix import BACKUP_SCOPES
from hicache_ref.core.tiers import EVICT_SIZES
from hicache_ref.semantics import SEMANTICS, SWITCHES, preset


def _tokens(text: str) -> int:
    try:
        return parse_size(text, name="", minimum=0)
    except ValueError as e:
        raise argparse.ArgumentTypeError(clip(str(e).removeprefix(": "), 160)) from None


def add_arguments(p) -> None:
    """The request-path and sizing options (defaults None: the preset's or the spec's value)."""
    p.add_argument("--semantics", choices=SEMANTICS, default="reference",
                   help="preset for the request-path switches below: upstream (SGLang's decisions) or "
                        "reference (the default); each switch given explicitly overrides it")
    p.add_argument("--hit-count", choices=HIT_COUNTS,
                   help="per_insert: every insert counts a hit, as upstream (chunked inserts and write_back "
                        "excepted); per_request: a request counts each node once (reference)")
    p.add_argument("--pd-disagg", action="store_true",
                   help="insert every request unfinished, then finished, as a PD-disaggregated prefill "
                        "server does (cache_unfinished_req, cache_finished_req)")
    p.add_argument("--backup-scope", choices=BACKUP_SCOPES,
                   help="node: back up a node only once its parent is backed up, as upstream (both presets); "
                        "path: back up its ancestors with it (the seed's)")
    p.add_argument("--evict-size", choices=EVICT_SIZES,
                   help="whole: a short tier evicts as much as the allocation asks, as upstream; "
                        "shortfall: only what is missing (reference)")
    p.add_argument("--load-back-threshold", type=_tokens, metavar="TOKENS",
                   help="host-cached prefixes shorter than this many tokens are recomputed, not loaded "
                        "(upstream 10, reference 0)")
    p.add_argument("--load-back-quota", type=_tokens, metavar="TOKENS",
                   help="refuse loads of more tokens than this (upstream's mem_quota; default: none)")
    p.add_argument("--hicache-ratio", type=types.positive_real("a number"), metavar="R",
                   help="L2 = this x L1 tokens, aligned up to pages plus one, as upstream (needs --l1-tokens)")
    p.add_argument("--hicache-size", type=types.count(1), metavar="GB",
                   help="L2 = this many GB (10^9 bytes) per rank of KV, as upstream; overrides the ratio "
                        "there, so give one of the two")


def spec_fields(a) -> dict:
    """CacheSpec fields: the preset's switches, those given explicitly instead, and the rest given."""
    fields = preset(a.semantics)
    for k in SWITCHES:
        if getattr(a, k) is not None:
            fields[k] = getattr(a, k)
    fields.update(semantics=a.semantics, pd_disagg=a.pd_disagg, load_back_quota=a.load_back_quota)
    return fields


def size_host(a, l1: int | None, l2: int | None) -> tuple[int | None, dict | None]:
    """(L2 tokens, sizing report): --l2-tokens as given, or sized from --hicache-ratio /
    --hicache-size as upstream; conflicting or incomplete options refused naming them."""
    option = "--hicache-size" if a.hicache_size is not None else "--hicache-ratio" if a.hicache_ratio else None
    if option is None:
        return l2, None
    if a.hicache_size is not None and a.hicache_ratio is not None:
        raise CliError("--hicache-size", "overrides --hicache-ratio (as upstream); give one of the two")
    if l2 is not None:
        raise CliError(option, "sizes L2, and so does --l2-tokens; give one of the two")
    if l1 is None:
        raise CliError(option, "sizes L2 against the device pool: give --l1-tokens")
    geom = KVGeometry(a.attention, a.layers, a.heads, a.kv_dim, parse_dtype(a.dtype), a.page_size)
    device = l1 // a.page_size * a.page_size
    host = sizing.host_tokens(device, a.page_size, geom.token_bytes, ratio=a.hicache_ratio, size_gb=a.hicache_size)
    try:
        sizing.check_host_larger(host, device)
    except ValueError as e:
        raise CliError(option, str(e)) from None
    host_bytes = host * geom.token_bytes
    report = dict(hicache_ratio=a.hicache_ratio, hicache_size_gb=a.hicache_size, device_tokens=device,
                  host_tokens=host, host_bytes=host_bytes, token_bytes=geom.token_bytes)
    if a.materialize:  # only real pools take host memory here
        available = sizing.mem_available()
        if available is None:
            report["free_memory_check"] = "not run: MemAvailable unknown (no /proc/meminfo)"
        else:
            try:
                sizing.check_host_memory(host_bytes, available)
            except ValueError as e:
                raise CliError(option, str(e)) from None
            report["free_memory_check"] = "passed"
    else:
        report["free_memory_check"] = "not run: pools not materialized (no host memory taken)"
    return host, report
