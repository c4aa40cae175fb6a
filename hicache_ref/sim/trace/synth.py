"""Synthetic Mooncake traces with the prefix reuse rate asked for, and the reuse placed where asked:
`hicache trace synth`.

Conversations (sessions) take turns; a turn re-sends the previous prompt, its output and a new
message. Every conversation opens with one global prefix (a system prompt and tool block all share),
sized to carry `global_prefix_share` of the reused tokens; the rest comes from a conversation's own
history, which must stay cached across the turns of the other sessions in between: how many
sessions interleave and how long they think set those reuse distances, and a share of turns
followed by a long pause puts some of them beyond what holds the open conversations. The
structure (who speaks when, how long) is drawn first; then a feedback step cuts each request's
reused prefix so the running rate stays on the target. One seeded generator: the same arguments
give the same bytes.
The rules: hicache_ref/README.md, "Traces".
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from hicache_ref.sim.trace.reader import BLOCK_TOKENS, TraceRequest
from hicache_ref.sim.trace.synth_schedule import schedule

MAX_BLOCK_ID = (2**32 - BLOCK_TOKENS) // BLOCK_TOKENS  # as hicache_ref.sim.trace.reader reads them
AUTO_MARGIN = 0.01  # the automatic global prefix aims this far above --reuse: the feedback needs slack


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return value


def _positive(name: str, value, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive number of {what}, got {value!r}")


def _check(requests, min_tokens, max_tokens, reuse, sessions, rate, seed, global_prefix_share, turns,
           think_time, long_pause_share, long_pause) -> None:
    _positive_int("requests", requests)
    _positive_int("min_tokens", min_tokens)
    _positive_int("max_tokens", max_tokens)
    if max_tokens < min_tokens:
        raise ValueError(f"max_tokens: {max_tokens} is below min_tokens {min_tokens}")
    if isinstance(reuse, bool) or not isinstance(reuse, (int, float)) or not 0 <= reuse < 1:
        raise ValueError(f"reuse: expected a fraction in [0, 1), got {reuse!r}")
    _positive_int("sessions", sessions)
    if rate is not None:
        _positive("rate", rate, "requests per second")
    _positive_int("seed", seed, 0)
    share = global_prefix_share
    if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1):
        raise ValueError(f"global_prefix_share: expected a fraction in [0, 1], got {share!r}")
    if turns is not None:
        _positive_int("turns", turns)
    if think_time is not None:
        _positive("think_time", think_time, "seconds")
        if rate is None:
            raise ValueError("think_time: needs a rate (arrivals in time to think between)")
    lps = long_pause_share
    if lps is not None and (isinstance(lps, bool) or not isinstance(lps, (int, float)) or not 0 <= lps < 1):
        raise ValueError(f"long_pause_share: expected a fraction in [0, 1), got {lps!r}")
    if long_pause is not None:
        _positive("long_pause", long_pause, "seconds")
        if rate is None:
            raise ValueError("long_pause: needs a rate (arrivals in time to pause between)")
    if bool(lps) != (long_pause is not None):
        raise ValueError("long_pause_share: comes with long_pause (the share of turns followed by a pause "
                         "of that many seconds)" if lps else
                         "long_pause: needs long_pause_share > 0 (the share of turns it follows)")
    worst = requests * -(-max_tokens // BLOCK_TOKENS)  # every block fresh
    if worst > MAX_BLOCK_ID + 1:
        raise ValueError(f"requests: {requests:,} requests of up to {max_tokens:,} tokens may need {worst:,} distinct "
                         f"blocks; hash ids stop at {MAX_BLOCK_ID + 1:,} (token ids are 32-bit)")


class Synthesized(NamedTuple):
    """A synthetic trace and the global prefix every conversation opens with (block ids 0..n-1)."""

    requests: list[TraceRequest]
    global_prefix_tokens: int


def _smallest(top: int, enough) -> int:
    """The least g in [0, top] with enough(g) (monotone), else top."""
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    return lo


def _global_blocks(plan, reuse: float, share: float | None, max_tokens: int) -> int:
    """Blocks of the global prefix: `share` of the reused tokens, or (None) the fewest that let the
    conversations carry `reuse`. A conversation opening shorter than it carries its leading whole blocks."""
    if len(plan) < 2:
        return 0
    total = sum(t.length for t in plan)
    opening: dict[int, int] = {}  # conversation -> whole blocks of its first turn
    for t in plan:
        opening.setdefault(t.conversation, t.length // BLOCK_TOKENS)
    carry = np.array([opening[t.conversation] for t in plan[1:]])  # the first request writes it
    first = np.array([t.first for t in plan[1:]])
    if share is None:
        later = sum(t.history // BLOCK_TOKENS for t in plan if not t.first)
        want = (reuse + AUTO_MARGIN) * total / BLOCK_TOKENS - later
        return _smallest(max_tokens // BLOCK_TOKENS, lambda g: np.minimum(carry[first], g).sum() >= want)
    want = share * reuse * total / BLOCK_TOKENS
    return _smallest(max_tokens // BLOCK_TOKENS, lambda g: np.minimum(carry, g).sum() >= want)


def synthesize_trace(requests: int, min_tokens: int, max_tokens: int, reuse: float, sessions: int = 16,
                     rate: float | None = None, seed: int = 0, global_prefix_share: float | None = None,
                     turns: int | None = None, think_time: float | None = None,
                     long_pause_share: float | None = None, long_pause: float | None = None) -> Synthesized:
    """`requests` Mooncake requests (see the module docstring) and the global prefix's length.
    `sessions`: conversations open at once; `turns`: a conversation's last turn (None: until it would
    pass `max_tokens`); `think_time`: mean seconds before a conversation speaks again (needs `rate`);
    `global_prefix_share`: of the reused tokens, the part from the global prefix (None: only as much
    as `reuse` needs); `long_pause_share`: of the turns, those a conversation follows with a pause of
    mean `long_pause` seconds (both or neither; needs `rate`), which puts its next turn's reuse far
    out, past an L2. ValueError naming a bad argument."""
    _check(requests, min_tokens, max_tokens, reuse, sessions, rate, seed, global_prefix_share, turns, think_time,
           long_pause_share, long_pause)
    plan = schedule(np.random.default_rng(seed), requests, min_tokens, max_tokens, sessions, turns,
                    think_time, rate, long_pause_share or 0.0, long_pause)
    g = _global_blocks(plan, reuse, global_prefix_share, max_tokens)
    prompts: dict[int, tuple[int, ...]] = {}  # conversation -> its last prompt's whole blocks
    next_id, global_seen = g, 0
    out: list[TraceRequest] = []
    so_far = reused_so_far = 0
    for t in plan:
        n = t.length
        parent = tuple(range(min(g, n // BLOCK_TOKENS))) if t.first else prompts[t.conversation]
        reusable = min(len(parent), global_seen) if t.first else len(parent)
        want = reuse * (so_far + n) - reused_so_far
        need = int(np.clip(round(want / BLOCK_TOKENS), 0, n // BLOCK_TOKENS))
        blocks = min(need, reusable)
        # a first turn carries the whole global prefix (the first request writes it) unless cut
        kept = len(parent) if t.first and need >= reusable else blocks
        fresh = -(-n // BLOCK_TOKENS) - kept
        ids = parent[:kept] + tuple(range(next_id, next_id + fresh))
        next_id += fresh
        if t.first:
            global_seen = max(global_seen, kept)
        out.append(TraceRequest(t.timestamp_ms, n, t.output, ids))
        prompts[t.conversation] = ids[: n // BLOCK_TOKENS]
        so_far += n
        reused_so_far += blocks * BLOCK_TOKENS
    return Synthesized(out, g * BLOCK_TOKENS)


def synthesize(requests: int, min_tokens: int, max_tokens: int, reuse: float, sessions: int = 16,
               rate: float | None = None, seed: int = 0, global_prefix_share: float | None = None,
               turns: int | None = None, think_time: float | None = None,
               long_pause_share: float | None = None, long_pause: float | None = None) -> list[TraceRequest]:
    """The requests of synthesize_trace (the same arguments)."""
    return synthesize_trace(requests, min_tokens, max_tokens, reuse, sessions, rate, seed,
                            global_prefix_share, turns, think_time, long_pause_share, long_pause).requests


def global_share(trace: Synthesized, reused_tokens: list[int]) -> float:
    """Of the reused tokens (per request, stats.prefix_reuse_tokens), the part in the global prefix."""
    g = trace.global_prefix_tokens // BLOCK_TOKENS
    in_global = 0
    for r, reused in zip(trace.requests, reused_tokens, strict=True):
        lead = next((k for k in range(min(g, len(r.hash_ids))) if r.hash_ids[k] != k), min(g, len(r.hash_ids)))
        in_global += min(reused, lead * BLOCK_TOKENS)
    total = sum(reused_tokens)
    return in_global / total if total else 0.0


@dataclass(frozen=True)
class Workload:
    """synthesize's arguments, as one value."""

    requests: int
    min_tokens: int
    max_tokens: int
    reuse: float
    sessions: int = 16
    rate: float | None = None
    seed: int = 0
    global_prefix_share: float | None = None
    turns: int | None = None
    think_time: float | None = None
    long_pause_share: float | None = None
    long_pause: float | None = None

    def synthesize(self) -> Synthesized:
        """The trace these arguments make."""
        return synthesize_trace(**asdict(self))


# The seed's P800 acceptance workload: 24K-64K tokens, prefix reuse 0.82. Parameters found by a search
# over sessions, think time, global prefix share and long pauses on the one-pass LRU curve (page size
# 64). A global prefix carrying 0.55 of the reuse is what L1 alone keeps; 100 conversations thinking
# ~33 s between turns put history reuse at ~1M-4M tokens (past L1 and a private L2 of 835K, within
# 400K + 5 x 835K); 0.44 of the turns followed by a ~450 s pause put about a tenth of the reuse beyond
# L1 + the TP-8-shared L2 (400K + 8 x 835K), so the curve is flat near its top.
SEED_WORKLOAD = Workload(requests=1700, min_tokens=24_000, max_tokens=64_000, reuse=0.82, sessions=100,
                         rate=2.0, seed=0, global_prefix_share=0.55, think_time=33.0, long_pause_share=0.44,
                         long_pause=450.0)


def seed_trace() -> list[TraceRequest]:
    """The requests of SEED_WORKLOAD: the trace of the seed scenario."""
    return SEED_WORKLOAD.synthesize().requests


def write_trace(path, requests: list[TraceRequest], gz: bool | None = None) -> None:
    """Write requests as Mooncake JSONL (timestamp ms as an integer), one per line; a name ending
    in .gz is written gzip-compressed, as hicache_ref.sim.trace.reader reads it. `path` may instead be a
    binary file object (what a caller writing through a temporary file gives); `gz` then says
    whether to compress (default: no)."""
    import gzip

    if hasattr(path, "write"):
        _write_lines(gzip.GzipFile(fileobj=path, mode="wb", mtime=0) if gz else path, requests, close=gz)
        return
    with open(path, "wb") as f:
        _write_lines(gzip.GzipFile(fileobj=f, mode="wb", mtime=0) if str(path).endswith(".gz") else f, requests,
                     close=str(path).endswith(".gz"))


def _write_lines(f, requests: list[TraceRequest], close: bool) -> None:
    """The requests' JSONL lines on binary stream `f` (closed after when it is a gzip layer)."""
    try:
        for r in requests:
            f.write((json.dumps(dict(timestamp=int(r.timestamp), input_length=r.input_length,
                                     output_length=r.output_length, hash_ids=list(r.hash_ids))) + "\n").encode())
    finally:
        if close:
            f.close()
