"""Mooncake-style JSONL of any block size, and vLLM's timed_trace field mapping, as harness requests.

A line holds a timestamp, an input length, an output length and hash ids of `block_tokens`-token
blocks, chained as Mooncake's are. Field names and the timestamp's unit are options, as vLLM's
`vllm bench serve --dataset-name timed_trace` has them (`--timed-trace-label-*`, its
`--timed-trace-chunk-hash-size`, default 16, and `--timed-trace-sec-multiplier`, seconds per
timestamp unit, default 1). The ids are re-blocked to 512 tokens (hicache_ref.sim.trace.convert.reblock),
timestamps become milliseconds.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from hicache_ref.sim.trace.convert.reblock import reblock
from hicache_ref.sim.trace.reader import BLOCK_TOKENS, TraceRequest, read_json_lines

MAX_HASH_ID = 2**63 - 1  # any id a 64-bit hash gives; the new ids are dense


class Labels(NamedTuple):
    """The field names of one request line."""

    timestamp: str = "timestamp"
    input_length: str = "input_length"
    output_length: str = "output_length"
    hash_ids: str = "hash_ids"


MOONCAKE_MS = 0.001  # Mooncake's timestamps are milliseconds
VLLM_CHUNK_TOKENS = 16  # vLLM's --timed-trace-chunk-hash-size default
VLLM_SECONDS_PER_UNIT = 1.0  # vLLM's --timed-trace-sec-multiplier default


def _number(obj, key, path, line_no, minimum, integer):
    v = obj.get(key)
    ok = not isinstance(v, bool) and isinstance(v, int if integer else (int, float)) and \
        (integer or math.isfinite(v)) and v >= minimum
    if not ok:
        what = "an integer" if integer else "a finite number"
        raise ValueError(f"{path}: line {line_no}: {key}: expected {what} >= {minimum}, got {str(v)[:80]}")
    return v


def read_blocked(path, block_tokens: int, labels: Labels | None = None, seconds_per_unit: float = MOONCAKE_MS,
                 limit: int | None = None) -> list[TraceRequest]:
    """The requests of a JSONL trace whose hash ids name `block_tokens`-token blocks, in file order,
    with their ids as 512-token blocks and timestamps in ms; ValueError naming the file, line and key."""
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
        raise ValueError(f"block_tokens: expected a positive number of tokens, got {block_tokens!r}")
    if not (isinstance(seconds_per_unit, (int, float)) and math.isfinite(seconds_per_unit) and seconds_per_unit > 0):
        raise ValueError(f"seconds_per_unit: expected a positive number, got {seconds_per_unit!r}")
    labels = labels or Labels()
    out = []
    for line_no, obj in read_json_lines(path):
        if limit is not None and len(out) >= limit:
            break
        n = _number(obj, labels.input_length, path, line_no, 1, True)
        ids = obj.get(labels.hash_ids)
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool)
                                                and 0 <= h <= MAX_HASH_ID for h in ids):
            raise ValueError(f"{path}: line {line_no}: {labels.hash_ids}: expected a list of integers in "
                             f"[0, 2^63), got {str(ids)[:80]}")
        if len(ids) != -(-n // block_tokens):
            raise ValueError(f"{path}: line {line_no}: {labels.hash_ids}: expected ceil({labels.input_length} / "
                             f"{block_tokens}) = {-(-n // block_tokens)} ids, got {len(ids)} (is the block size "
                             f"{block_tokens}?)")
        ts = _number(obj, labels.timestamp, path, line_no, 0, False) if labels.timestamp in obj else 0
        out_len = _number(obj, labels.output_length, path, line_no, 0, True) if labels.output_length in obj else 0
        out.append(TraceRequest(ts * seconds_per_unit * 1000.0, n, out_len, tuple(ids)))
    return reblock(out, block_tokens, BLOCK_TOKENS)
