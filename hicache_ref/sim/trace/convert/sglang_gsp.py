"""SGLang bench_serving's generated-shared-prefix workload (and its multi-turn form) as harness requests.

`python -m sglang.bench_serving --dataset-name generated-shared-prefix` sends `gsp_num_groups` groups
of `gsp_prompts_per_group` conversations; each opens with its group's system prompt
(`gsp_system_prompt_len` tokens) followed by a question of its own (`gsp_question_len`) and asks for
`gsp_output_len` tokens. With `gsp_num_turns` N > 1 a conversation goes on for N turns, each prompt
being the previous prompt, its answer and a new question. Lengths are drawn in
[range_ratio x length, length] (`gsp_range_ratio`); requests are shuffled unless `gsp_ordered`.
Only the shape is upstream's, not its tokens: every segment here is distinct tokens of its own,
seeded, so the same arguments give the same trace. Turn k of every conversation comes before turn
k+1 of any (the bench sends a turn when the one before is answered); within a turn the order is
shuffled (or group by group with `ordered`). All arrive at time 0, as at an unlimited request rate.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hicache_ref.sim.trace.convert.reblock import reblock
from hicache_ref.sim.trace.convert.token_ids import chained_ids
from hicache_ref.sim.trace.reader import BLOCK_TOKENS, TraceRequest

HASH_BLOCK_TOKENS = 16  # the blocks segments are hashed in before re-blocking (sharing kept to 16 tokens)
MAX_TOKENS = 500_000_000  # the whole shape's prompt tokens, bounded before any is made


class GspShape(NamedTuple):
    """bench_serving's gsp_* arguments (its defaults)."""

    num_groups: int = 64
    prompts_per_group: int = 16
    system_prompt_len: int = 2048
    question_len: int = 128
    output_len: int = 256
    num_turns: int = 1
    range_ratio: float = 1.0
    ordered: bool = False
    seed: int = 1


def _check(s: GspShape) -> None:
    for name in ("num_groups", "prompts_per_group", "num_turns"):
        v = getattr(s, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    for name in ("system_prompt_len", "question_len", "output_len", "seed"):
        v = getattr(s, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name}: expected an integer >= 0, got {v!r}")
    if s.system_prompt_len + s.question_len < 1:
        raise ValueError("system_prompt_len, question_len: a prompt needs at least one token")
    if isinstance(s.range_ratio, bool) or not isinstance(s.range_ratio, (int, float)) or not 0 <= s.range_ratio <= 1:
        raise ValueError(f"range_ratio: expected a number in [0, 1], got {s.range_ratio!r}")
    turns = s.num_turns
    longest = turns * (s.question_len + s.output_len) + s.system_prompt_len
    if s.num_groups * s.prompts_per_group * turns * longest > MAX_TOKENS:
        raise ValueError(f"the shape asks for up to {s.num_groups * s.prompts_per_group * turns * longest:,} prompt "
                         f"tokens, more than {MAX_TOKENS:,}: fewer groups, prompts, turns or tokens")


def gsp_requests(shape: GspShape | None = None) -> list[TraceRequest]:
    """The shape's requests (bench_serving's defaults when None) as 512-token-block requests (module
    docstring); ValueError naming the argument."""
    shape = shape or GspShape()
    _check(shape)
    rng = np.random.default_rng(shape.seed)
    next_token = [0]

    def fresh(n: int) -> np.ndarray:  # tokens no other segment has
        next_token[0] += n
        return np.arange(next_token[0] - n, next_token[0], dtype=np.uint64)

    def segment(length: int) -> np.ndarray:
        return fresh(int(rng.integers(int(length * shape.range_ratio), length + 1)) if length else 0)

    systems = [segment(shape.system_prompt_len) for _ in range(shape.num_groups)]
    history = [systems[g] for g in range(shape.num_groups) for _ in range(shape.prompts_per_group)]
    digests: dict[bytes, int] = {}
    out = []
    for _ in range(shape.num_turns):
        order = np.arange(len(history)) if shape.ordered else rng.permutation(len(history))
        turn = []
        for c in order:
            prompt = np.concatenate([history[c], segment(shape.question_len)])
            if not len(prompt):  # both lengths drawn as 0: a prompt has at least one token
                prompt = fresh(1)
            answer = segment(shape.output_len)
            turn.append((c, prompt, len(answer)))
            history[c] = np.concatenate([prompt, answer])
        out += [TraceRequest(0.0, len(p), n, chained_ids(p, HASH_BLOCK_TOKENS, digests)) for _, p, n in turn]
    return reblock(out, HASH_BLOCK_TOKENS, BLOCK_TOKENS)
