"""Traces as teams have them, turned into the harness's 512-token-block Mooncake requests.

One reader per format, looked up by name in FORMATS (`hicache trace convert --from NAME`):
`mooncake` (hash ids of any block size), `vllm` (vLLM's timed_trace fields), `tokens` (token-id
JSONL, hashed into chained blocks); `sglang-gsp` is bench_serving's generated-shared-prefix shape,
made from its arguments (`hicache trace gsp`). Every reader reads through
hicache_ref.sim.trace.reader.read_json_lines, so the trace reader's bounds apply, and re-blocks with
hicache_ref.sim.trace.convert.reblock. Formats and the re-blocking rule: hicache_ref/README.md, "Traces".
"""

from __future__ import annotations

FORMATS = {
    "mooncake": "Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids) with --block-tokens-token blocks",
    "vllm": "vLLM timed_trace JSONL: its --timed-trace-label-* field names, chunk hash size (--block-tokens, "
            "default 16) and seconds per timestamp unit (--sec-multiplier, default 1)",
    "tokens": "token-id JSONL (token_ids, input_ids or prompt_token_ids; timestamp ms, output_length), "
              "hashed into chained --block-tokens blocks (default 16)",
}
DEFAULT_BLOCK_TOKENS = {"mooncake": 512, "vllm": 16, "tokens": 16}


def read_format(name: str, path, block_tokens: int | None = None, labels=None, sec_multiplier: float | None = None,
                limit: int | None = None) -> list:
    """The requests of `path` in format `name` (FORMATS) as 512-token-block TraceRequests."""
    if name not in FORMATS:
        raise ValueError(f"format: {name!r} is not one of {', '.join(FORMATS)}")
    block = block_tokens if block_tokens is not None else DEFAULT_BLOCK_TOKENS[name]
    if name == "tokens":
        from hicache_ref.sim.trace.convert.token_ids import read_token_ids

        return read_token_ids(path, block, limit)
    from hicache_ref.sim.trace.convert.blocked import MOONCAKE_MS, VLLM_SECONDS_PER_UNIT, Labels, read_blocked

    unit = sec_multiplier if sec_multiplier is not None else (VLLM_SECONDS_PER_UNIT if name == "vllm" else MOONCAKE_MS)
    return read_blocked(path, block, labels or Labels(), unit, limit)
