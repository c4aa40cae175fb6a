"""`hicache trace convert|gsp`: traces as teams have them, written as the harness's Mooncake JSONL.

convert reads a Mooncake trace of any block size, a vLLM timed_trace or a token-id log
(hicache_ref.sim.trace.convert); gsp makes SGLang bench_serving's generated-shared-prefix shape from its
own arguments. Both write 512-token blocks (or --out-block-tokens), through a temporary file.
"""

from __future__ import annotations

import json

from conformance.common import args as types
from conformance.common.errors import CliError, clip_path
from conformance.common.inputs import new_file, requests_of, text_file
from conformance.common.safe_write import atomic_file
from hicache_ref.sim.trace.convert import DEFAULT_BLOCK_TOKENS, FORMATS, read_format
from hicache_ref.sim.trace.convert.blocked import Labels
from hicache_ref.sim.trace.convert.reblock import reblock
from hicache_ref.sim.trace.convert.sglang_gsp import GspShape, gsp_requests
from hicache_ref.sim.trace.reader import BLOCK_TOKENS
from hicache_ref.sim.trace.stats import prefix_reuse_tokens
from hicache_ref.sim.trace.synth import write_trace

_BLOCK = types.count(1, 1 << 20)


def add_parsers(sub) -> None:
    c = sub.add_parser("convert", help="write a Mooncake trace of 512-token blocks from a Mooncake trace of any "
                                       "block size, a vLLM timed_trace or a token-id JSONL",
                       description="Formats and the re-blocking rule (prefix sharing kept at the coarser block "
                                   "size): hicache_ref/README.md, \"Traces\". " + "; ".join(
                                       f"{k}: {v}" for k, v in FORMATS.items()))
    c.add_argument("path", help="the trace to read (.jsonl or .jsonl.gz)")
    c.add_argument("--from", dest="fmt", choices=tuple(FORMATS), required=True, help="its format")
    c.add_argument("--out", required=True, help="JSONL file to write (.gz: gzip)")
    c.add_argument("--block-tokens", type=_BLOCK, metavar="N",
                   help="tokens per hash id in the input (mooncake: 512, vllm: its chunk hash size, 16) or per "
                        "hashed block (tokens: 16)")
    c.add_argument("--out-block-tokens", type=_BLOCK, default=BLOCK_TOKENS, metavar="N",
                   help="tokens per hash id written; the harness replays 512")
    c.add_argument("--sec-multiplier", type=types.positive_real("seconds per timestamp unit"), metavar="X",
                   help="seconds per timestamp unit (vllm: its --timed-trace-sec-multiplier, default 1; "
                        "mooncake: 0.001, milliseconds)")
    for field in Labels._fields:
        c.add_argument(f"--label-{field.replace('_', '-')}", default=field, metavar="KEY",
                       help=f"the field holding {field} (vLLM's --timed-trace-label-{field.replace('_', '-')})")
    c.add_argument("--limit", type=types.count(0), help="convert only the first N requests")
    c.add_argument("--json", action="store_true", help="print what was written as one JSON object")
    c.set_defaults(_trace_run=_convert)
    g = sub.add_parser("gsp", help="write SGLang bench_serving's generated-shared-prefix workload (multi-turn "
                                   "with --gsp-num-turns) as a Mooncake trace",
                       description="The shape of `sglang.bench_serving --dataset-name generated-shared-prefix` "
                                   "with the same arguments and defaults; distinct seeded tokens, all at time 0 "
                                   "(hicache_ref/sim/trace/convert/sglang_gsp.py says how turns are ordered).")
    g.add_argument("--out", required=True, help="JSONL file to write (.gz: gzip)")
    d = GspShape()
    for name in ("num_groups", "prompts_per_group", "system_prompt_len", "question_len", "output_len", "num_turns"):
        low = 1 if name in ("num_groups", "prompts_per_group", "num_turns") else 0
        g.add_argument(f"--gsp-{name.replace('_', '-')}", dest=name, type=types.count(low, 10_000_000),
                       default=getattr(d, name), metavar="N", help=f"bench_serving's gsp_{name}")
    g.add_argument("--gsp-range-ratio", dest="range_ratio", type=types.unit_interval("a fraction"),
                   default=d.range_ratio, metavar="R", help="lengths drawn in [R x length, length]")
    g.add_argument("--gsp-ordered", dest="ordered", action="store_true", help="keep group order (no shuffle)")
    g.add_argument("--seed", type=types.count(0), default=d.seed, help="the same seed writes the same trace")
    g.add_argument("--json", action="store_true", help="print what was written as one JSON object")
    g.set_defaults(_trace_run=_gsp)


def _write(a, requests: list, extra: dict) -> int:
    out = new_file("--out", a.out)
    blocks = getattr(a, "out_block_tokens", BLOCK_TOKENS)
    written = requests if blocks == BLOCK_TOKENS else reblock(requests, BLOCK_TOKENS, blocks)
    with atomic_file(out, binary=True) as f:  # Ctrl-C or a full disk: no partial trace, any old one kept
        write_trace(f, written, gz=out.name.endswith(".gz"))
    total = sum(r.input_length for r in requests)
    reuse = sum(prefix_reuse_tokens(requests)) / total if total else 0.0
    fig = dict(out=str(out), requests=len(requests), input_tokens=total, block_tokens=blocks,
               prefix_reuse_rate=reuse, **extra)
    print(json.dumps(fig, indent=2) if a.json else
          f"wrote {len(requests):,} requests, {total:,} input tokens to {out} in {blocks}-token blocks: "
          f"prefix reuse rate {reuse:.4f} (at 512-token blocks)")
    return 0


def _convert(a) -> int:
    path = text_file("path", a.path, "a JSONL trace", streams=True)
    new_file("--out", a.out)  # checked before the work, not after it
    labels = Labels(a.label_timestamp, a.label_input_length, a.label_output_length, a.label_hash_ids)
    try:
        requests = read_format(a.fmt, path, a.block_tokens, labels, a.sec_multiplier, a.limit)
    except ValueError as e:
        raise CliError("path", str(e)) from None
    requests = requests_of("path", path, requests)
    block = a.block_tokens or DEFAULT_BLOCK_TOKENS[a.fmt]
    return _write(a, requests, dict(source=str(clip_path(path)), source_format=a.fmt, source_block_tokens=block))


def _gsp(a) -> int:
    new_file("--out", a.out)
    shape = GspShape(a.num_groups, a.prompts_per_group, a.system_prompt_len, a.question_len, a.output_len,
                     a.num_turns, a.range_ratio, a.ordered, a.seed)
    try:
        requests = gsp_requests(shape)
    except ValueError as e:
        option, _, why = str(e).partition(": ")
        raise CliError(f"--gsp-{option.replace('_', '-')}" if option in GspShape._fields else "--gsp-num-groups",
                       why or str(e)) from None
    return _write(a, requests, dict(shape=shape._asdict()))
