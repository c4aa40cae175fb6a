"""Re-blocking: a trace of B-token hash blocks as a trace of T-token blocks, prefix sharing kept.

The harness replays 512-token blocks (hicache_ref.sim.trace.reader.BLOCK_TOKENS); Mooncake-style traces
come with blocks of 16 (vLLM's timed_trace default), 64, 512 or any other size. The rule:

- Block k of a request covers its tokens [kT, min((k+1)T, n)). Its key is the new id of block k-1
  (the chain, as Mooncake's prefix hashes chain) and the ids of the source blocks that overlap it.
  Equal keys get one new id. So two requests share their first k new blocks exactly when they share
  every source block overlapping those T*k tokens: sharing is kept at the coarser of the two block
  sizes, and sharing that ends inside a new block stops at that block's start (under T tokens lost).
- A last block cut short by the request's end (a tail) is the start of a whole block when its source
  ids begin that block's: it takes the id of the first such whole block seen under the same chain
  (else of the longest such tail, else its own), since a block's tokens are its id's and a tail is
  their start. So 512 -> 16 -> 512 gives back the same sharing, tails included.
New ids count up from 0 in the order blocks are first seen. Timestamps and lengths are kept.
Definition and examples: hicache_ref/README.md, "Traces".
"""

from __future__ import annotations

from hicache_ref.sim.trace.reader import BLOCK_TOKENS, TraceRequest

MAX_ID = (2**32 - BLOCK_TOKENS) // BLOCK_TOKENS  # a 512-token block's tokens must fit in uint32


def _check(requests, from_tokens: int, to_tokens: int) -> None:
    for name, v in (("from_tokens", from_tokens), ("to_tokens", to_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive number of tokens, got {v!r}")
    for i, r in enumerate(requests):
        if len(r.hash_ids) != -(-r.input_length // from_tokens):
            raise ValueError(f"request {i}: {len(r.hash_ids)} hash ids for {r.input_length} tokens in blocks of "
                             f"{from_tokens} (expected {-(-r.input_length // from_tokens)})")


def reblock(requests: list, from_tokens: int, to_tokens: int = BLOCK_TOKENS) -> list[TraceRequest]:
    """`requests` (anything with timestamp, input_length, output_length and hash_ids of `from_tokens`-token
    blocks) with hash ids of `to_tokens`-token blocks by the module's rule; ValueError for a request
    whose id count is not ceil(input_length / from_tokens), or more blocks than uint32 tokens hold."""
    _check(requests, from_tokens, to_tokens)
    ids: dict[tuple, int] = {}  # (parent id, source ids) of a whole block -> its new id
    children: dict[tuple, dict] = {}  # (parent, first source id) -> source-id tuples (keys), first seen first
    out_ids: list[list] = []
    tails: list[tuple[int, tuple]] = []
    f, t = from_tokens, to_tokens
    for i, r in enumerate(requests):
        parent, mine, h, n = -1, [], r.hash_ids, r.input_length
        for start in range(0, n // t * t, t):
            src = tuple(h[start // f: (start + t - 1) // f + 1])
            children.setdefault((parent, src[0]), {}).setdefault(src, None)
            parent = ids.setdefault((parent, src), len(ids))
            mine.append(parent)
        if n % t:  # the tail: resolved once every whole block is known
            src = tuple(h[n // t * t // f:])
            children.setdefault((parent, src[0]), {}).setdefault(src, None)
            tails.append((i, (parent, src)))
            mine.append(None)
        out_ids.append(mine)
    for i, key in tails:
        out_ids[i][-1] = _tail_id(key, ids, children)
    if len(ids) - 1 > MAX_ID:
        raise ValueError(f"{len(ids):,} distinct {to_tokens}-token blocks: more than uint32 token ids hold "
                         f"({MAX_ID + 1:,})")
    return [TraceRequest(r.timestamp, r.input_length, r.output_length, tuple(m))
            for r, m in zip(requests, out_ids, strict=True)]


def _tail_id(key: tuple, ids: dict, children: dict) -> int:
    """The id of a tail (parent, source ids): the first whole block under the same parent whose
    source ids start with the tail's, else the longest tail that does (first seen), else its own."""
    parent, src = key
    extending = [u for u in children[(parent, src[0])] if u[:len(src)] == src]
    whole = [u for u in extending if (parent, u) in ids]
    pick = whole[0] if whole else max(extending, key=len)  # max keeps the first of the longest
    return ids.setdefault((parent, pick), len(ids))
