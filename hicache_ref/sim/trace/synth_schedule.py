"""Who speaks when, and how long: the conversation structure `hicache trace synth` fills with blocks.

`sessions` conversation slots are open at once. Each arrival (Poisson at `rate`, or all at time 0)
goes to a slot drawn at random among those not thinking; after a turn a slot thinks for a time of
mean `think_time` seconds (gamma, about +-50%). When every slot thinks, the next request waits for
the first to be done, so arrivals then come at most `sessions / think_time` a second. After a
turn, a conversation goes on a long pause with probability `long_pause_share` (mean `long_pause`
seconds, gamma, about +-25%): a user back hours later, an agent resuming a parked task. It leaves
its slot; a slot that would open a new conversation resumes one back from its pause instead, so
as many conversations stay open. A conversation ends after `turns` turns or when its next turn would pass `max_tokens`; its slot then
opens a new one. The turns of other slots in between are what a conversation's history must
survive in a cache: more slots and longer think times, longer reuse distances. Lengths do not
depend on the blocks reused, so this is drawn before them.
"""

from __future__ import annotations

import heapq
import math
from typing import NamedTuple

import numpy as np

OUTPUT_MEAN = 256  # median output tokens of a turn (lognormal)
THINK_SHAPE = 4  # think times: gamma of this shape (spread +-50%), so a longer mean spaces turns out
LONG_PAUSE_SHAPE = 16  # long pauses: gamma of this shape (+-25%), so they stay long next to the think time


class Turn(NamedTuple):
    """One request of the plan."""

    conversation: int  # numbered in order of their first turn
    first: bool  # opens its conversation (reuses only the global prefix)
    length: int  # input tokens
    history: int  # input tokens of the conversation's previous turn (0 for a first turn)
    output: int
    timestamp_ms: float


def schedule(rng: np.random.Generator, requests: int, min_tokens: int, max_tokens: int, sessions: int,
             turns: int | None, think_time: float | None, rate: float | None, long_pause_share: float = 0.0,
             long_pause: float | None = None) -> list[Turn]:
    """The plan of `requests` turns (the module docstring); arguments already checked (a long pause
    needs `rate`)."""
    lo, hi = math.log(min_tokens), math.log(max_tokens)
    user_mean = min(512, max(16, min_tokens // 8))  # a new user message: short next to the context
    ready = list(range(sessions))  # slots free to speak
    thinking: list[tuple[float, int]] = []  # (ready again at ms, slot)
    paused: list[tuple[float, int, int, int, int]] = []  # (back at ms, conversation, length, output, turns)
    conversation = [-1] * sessions
    length, last_output, spoken = [0] * sessions, [0] * sessions, [0] * sessions
    opened = 0
    clock_ms = 0.0
    out: list[Turn] = []
    for _ in range(requests):
        if rate is not None:
            clock_ms += rng.exponential(1000.0 / rate)
        while thinking and thinking[0][0] <= clock_ms:
            ready.append(heapq.heappop(thinking)[1])
        if ready:
            k = int(rng.integers(len(ready)))
            s = ready[k]
            ready[k] = ready[-1]
            ready.pop()
        else:  # every slot thinks: the arrival waits for the first to be done (time moves on to it)
            at, s = heapq.heappop(thinking)
            clock_ms = max(clock_ms, at)
        user = int(np.clip(rng.lognormal(math.log(user_mean), 1.0), 1, max(1, max_tokens // 4)))
        grown = length[s] + last_output[s] + user
        first = conversation[s] < 0 or grown > max_tokens or (turns is not None and spoken[s] >= turns)
        if first and _resume(paused, clock_ms, user, max_tokens, turns, s, conversation, length, last_output,
                             spoken):
            first, grown = False, length[s] + last_output[s] + user
        if first:
            n = min(max(int(round(math.exp(rng.uniform(lo, hi)))), min_tokens), max_tokens)
            conversation[s], spoken[s] = opened, 0
            opened += 1
        else:
            n = grown
        output = int(np.clip(rng.lognormal(math.log(OUTPUT_MEAN), 0.8), 1, 4096))
        out.append(Turn(conversation[s], first, n, 0 if first else length[s], output, float(int(clock_ms))))
        length[s], last_output[s] = n, output
        spoken[s] += 1
        # drawn only when asked, so traces without long pauses keep their bytes
        if long_pause_share and rng.random() < long_pause_share:  # it leaves its slot until it is back
            back_ms = clock_ms + rng.gamma(LONG_PAUSE_SHAPE, long_pause * 1000.0 / LONG_PAUSE_SHAPE)
            heapq.heappush(paused, (back_ms, conversation[s], n, output, spoken[s]))
            conversation[s] = -1
        if think_time:
            heapq.heappush(thinking, (clock_ms + rng.gamma(THINK_SHAPE, think_time * 1000.0 / THINK_SHAPE), s))
        else:
            ready.append(s)
    return out


def _resume(paused, clock_ms, user, max_tokens, turns, s, conversation, length, last_output, spoken) -> bool:
    """Put the conversation longest back from its pause into slot `s` (True), dropping those whose next
    turn would pass `max_tokens` or `turns`; False when none is back."""
    while paused and paused[0][0] <= clock_ms:
        _, c, n, output, done = heapq.heappop(paused)
        if n + output + user <= max_tokens and (turns is None or done < turns):
            conversation[s], length[s], last_output[s], spoken[s] = c, n, output, done
            return True
    return False
