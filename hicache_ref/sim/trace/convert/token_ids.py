"""Token-id JSONL (a request log with its prompt's token ids) as harness requests.

Each line holds the prompt's token ids (one of `token_ids`, `input_ids`, `prompt_token_ids`; two of
them must agree), and optionally `timestamp` (ms) and `output_length`. The ids are cut into blocks of
`block_tokens` and each block hashed with the hash of the block before it (BLAKE2b over the parent's
digest and the block's ids), as Mooncake's prefix hashes chain: equal digests at a position mean an
equal prefix. Digests become dense ids, then the blocks are re-blocked to 512 tokens
(hicache_ref.sim.trace.convert.reblock), which keeps sharing at `block_tokens` inside a request's last block.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from hicache_ref.sim.trace.convert.reblock import reblock
from hicache_ref.sim.trace.reader import BLOCK_TOKENS, TraceRequest, read_json_lines

TOKEN_KEYS = ("token_ids", "input_ids", "prompt_token_ids")
MAX_TOKEN_ID = 2**63 - 1


def chained_ids(tokens: np.ndarray, block_tokens: int, digests: dict[bytes, int]) -> tuple[int, ...]:
    """The dense id of each `block_tokens` block of `tokens` (the last may be partial), each block's
    digest chained on its parent's; `digests` maps digests to ids across a trace (added to here)."""
    out, parent = [], b""
    data = tokens.astype("<u8", copy=False)
    for start in range(0, len(data), block_tokens):
        parent = hashlib.blake2b(parent + data[start:start + block_tokens].tobytes(), digest_size=16).digest()
        out.append(digests.setdefault(parent, len(digests)))
    return tuple(out)


def read_token_ids(path, block_tokens: int = 16, limit: int | None = None) -> list[TraceRequest]:
    """The requests of a token-id JSONL in file order, as 512-token-block requests (module docstring);
    ValueError naming the file, line and key."""
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
        raise ValueError(f"block_tokens: expected a positive number of tokens, got {block_tokens!r}")
    digests: dict[bytes, int] = {}
    blocked = []
    for line_no, obj in read_json_lines(path):
        if limit is not None and len(blocked) >= limit:
            break
        present = [k for k in TOKEN_KEYS if k in obj]
        key = present[0] if present else None
        ids = obj.get(key) if key else None
        other = next((k for k in present[1:] if obj[k] != ids), None)
        if other is not None:  # two prompts for one request: neither is the one to hash
            raise ValueError(f"{path}: line {line_no}: {key} and {other} hold different token ids (one prompt, "
                             "two fields: keep one)")
        if not isinstance(ids, list) or not ids or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_TOKEN_ID for t in ids):
            raise ValueError(f"{path}: line {line_no}: {key or ' or '.join(TOKEN_KEYS)}: expected a non-empty "
                             f"list of token ids (integers >= 0), got {str(ids)[:80]}")
        ts = obj.get("timestamp", 0)
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            raise ValueError(f"{path}: line {line_no}: timestamp: expected a finite number >= 0 (ms), got {str(ts)[:80]}")
        out_len = obj.get("output_length", 0)
        if isinstance(out_len, bool) or not isinstance(out_len, int) or out_len < 0:
            raise ValueError(f"{path}: line {line_no}: output_length: expected an integer >= 0, got {str(out_len)[:80]}")
        tokens = np.asarray(ids, dtype=np.uint64)
        blocked.append(TraceRequest(float(ts), len(ids), out_len, chained_ids(tokens, block_tokens, digests)))
    return reblock(blocked, block_tokens, BLOCK_TOKENS)
