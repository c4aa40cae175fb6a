"""Synthetic Mooncake traces with the prefix reuse rate asked for: `hicache trace synth`.

Multi-turn sessions give natural reuse; before each request a feedback step cuts the reused prefix
so the running rate stays on the target. Arrivals are Poisson; everything comes from one seeded
generator, so the same arguments give the same bytes. The rules: hicache_ref/README.md, "Traces".
"""

from __future__ import annotations

import json
import math

import numpy as np

from hicache_ref.sim.trace import BLOCK_TOKENS, TraceRequest

MAX_BLOCK_ID = (2**32 - BLOCK_TOKENS) // BLOCK_TOKENS  # as hicache_ref.sim.trace reads them
DONOR_TRIES = 8  # earlier requests looked at for a longer prefix when the history is short


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return value


def _check(requests, min_tokens, max_tokens, reuse, sessions, rate, seed) -> None:
    _positive_int("requests", requests)
    _positive_int("min_tokens", min_tokens)
    _positive_int("max_tokens", max_tokens)
    if max_tokens < min_tokens:
        raise ValueError(f"max_tokens: {max_tokens} is below min_tokens {min_tokens}")
    if isinstance(reuse, bool) or not isinstance(reuse, (int, float)) or not 0 <= reuse < 1:
        raise ValueError(f"reuse: expected a fraction in [0, 1), got {reuse!r}")
    _positive_int("sessions", sessions)
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                             or not math.isfinite(rate) or rate <= 0):
        raise ValueError(f"rate: expected a positive number of requests per second, got {rate!r}")
    _positive_int("seed", seed, 0)
    worst = requests * -(-max_tokens // BLOCK_TOKENS)  # every block fresh
    if worst > MAX_BLOCK_ID + 1:
        raise ValueError(f"requests: {requests:,} requests of up to {max_tokens:,} tokens may need {worst:,} distinct "
                         f"blocks; hash ids stop at {MAX_BLOCK_ID + 1:,} (token ids are 32-bit)")


def synthesize(requests: int, min_tokens: int, max_tokens: int, reuse: float, sessions: int = 16,
               rate: float | None = None, seed: int = 0) -> list[TraceRequest]:
    """`requests` Mooncake requests (see the module docstring); ValueError naming a bad argument."""
    _check(requests, min_tokens, max_tokens, reuse, sessions, rate, seed)
    rng = np.random.default_rng(seed)
    next_id = 0
    history: list[tuple[int, ...] | None] = [None] * sessions  # a session's last prompt blocks
    history_len = [0] * sessions
    last_output = [0] * sessions
    out: list[TraceRequest] = []
    so_far = reused_so_far = 0
    clock_ms = 0.0
    lo, hi = math.log(min_tokens), math.log(max_tokens)
    user_mean = min(512, max(16, min_tokens // 8))  # a new user message: short next to the context
    for _ in range(requests):
        s = int(rng.integers(sessions))
        user = int(np.clip(rng.lognormal(math.log(user_mean), 1.0), 1, max(1, max_tokens // 4)))
        grown = history_len[s] + last_output[s] + user
        if history[s] is not None and min_tokens <= grown <= max_tokens:
            n, parent = grown, history[s]
            parent_full = history_len[s] // BLOCK_TOKENS
        else:  # a new conversation, opening with part of an earlier request (any session)
            n = int(round(math.exp(rng.uniform(lo, hi))))
            n = min(max(n, min_tokens), max_tokens)
            if out:
                donor = out[int(rng.integers(len(out)))]
                parent, parent_full = donor.hash_ids, donor.input_length // BLOCK_TOKENS
            else:
                parent, parent_full = (), 0
        want = reuse * (so_far + n) - reused_so_far
        need = int(np.clip(round(want / BLOCK_TOKENS), 0, n // BLOCK_TOKENS))
        if need > parent_full and out:  # the history offers too little: re-send a longer earlier prompt
            for _ in range(DONOR_TRIES):
                donor = out[int(rng.integers(len(out)))]
                if donor.input_length // BLOCK_TOKENS > parent_full:
                    parent, parent_full = donor.hash_ids, donor.input_length // BLOCK_TOKENS
            if parent_full * BLOCK_TOKENS > n - user:  # lengthen the request to carry it, within range
                n = min(max_tokens, max(n, parent_full * BLOCK_TOKENS + user))
                need = int(np.clip(round((reuse * (so_far + n) - reused_so_far) / BLOCK_TOKENS), 0,
                                   n // BLOCK_TOKENS))
        blocks = min(need, parent_full)
        total_blocks = -(-n // BLOCK_TOKENS)
        fresh = total_blocks - blocks
        ids = tuple(parent[:blocks]) + tuple(range(next_id, next_id + fresh))
        next_id += fresh
        output = int(np.clip(rng.lognormal(math.log(256), 0.8), 1, 4096))
        if rate is not None:
            clock_ms += rng.exponential(1000.0 / rate)
        out.append(TraceRequest(float(int(clock_ms)), n, output, ids))
        history[s], history_len[s], last_output[s] = ids, n, output
        so_far += n
        reused_so_far += blocks * BLOCK_TOKENS
    return out


def write_trace(path, requests: list[TraceRequest]) -> None:
    """Write requests as Mooncake JSONL (timestamp ms as an integer), one per line; a name ending
    in .gz is written gzip-compressed, as hicache_ref.sim.trace reads it."""
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for r in requests:
            f.write(json.dumps(dict(timestamp=int(r.timestamp), input_length=r.input_length,
                                    output_length=r.output_length, hash_ids=list(r.hash_ids))) + "\n")
