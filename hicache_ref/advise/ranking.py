"""The ranking of tried configurations and the rule that turns HiCache on or leaves it off.

On: some configuration's whole TTFT interval is a gain; the pick is the best central TTFT change
among those. Off otherwise, with the reason: the trace fits in L1, its reuse is too low, L1 alone
already hits all of it, the transfers cost more than the compute they save, or the best is
undecided (its interval spans zero).
"""

from __future__ import annotations

REUSE_FLOOR = 0.01  # an unlimited cache hitting under 1% of input tokens: nothing for HiCache to keep


def ranked(tried: dict) -> list[tuple]:
    """(candidate, figures, priced) of every tried configuration, best first (priced, lower TTFT change)."""
    rows = list(tried.items())
    order = sorted(range(len(rows)), key=lambda i: (rows[i][1][1].key, i))
    return [(rows[i][0], *rows[i][1]) for i in order]


def decide(rows: list[tuple], reuse: dict, l1_tokens: int, off_hit_rate: float) -> dict:
    """{"on", "pick" (candidate or None), "best" (the first row or None), "reason"} from ranked rows, the
    trace's reuse (ceiling_hit_rate: an unlimited cache; distinct_tokens: its distinct pages' tokens)
    and L1 alone's hit rate (HiCache off)."""
    gains = [r for r in rows if r[2].word == "gain"]
    best = rows[0] if rows else None
    if gains:
        return dict(on=True, pick=gains[0], best=best, reason=None)
    if reuse["distinct_tokens"] <= l1_tokens:
        why = (f"fits in L1: the trace's {reuse['distinct_tokens']:,} distinct tokens fit in L1's {l1_tokens:,}, so "
               "every reuse already hits there and no L2 adds a hit")
    elif reuse["ceiling_hit_rate"] < REUSE_FLOOR:
        why = (f"reuse too low: even an unlimited cache would hit {reuse['ceiling_hit_rate']:.2%} of input tokens "
               f"(under {REUSE_FLOOR:.0%})")
    elif rows and off_hit_rate >= reuse["ceiling_hit_rate"] - 1e-12:
        why = (f"L1 alone already hits all the reuse there is: {off_hit_rate:.2%} of input tokens, what an unlimited "
               "cache would hit, so no L2 adds a hit; HiCache could only add transfers")
    elif not any(r[1]["hit_rate"] > off_hit_rate for r in rows) and rows:
        why = (f"reuse too low for L2: no configuration tried hits more than L1 alone ({off_hit_rate:.2%}); the "
               f"reuse there is ({reuse['ceiling_hit_rate']:.2%} with an unlimited cache) lies beyond what host memory holds")
    elif best is None or best[2].ttft_change_pct is None:
        why = "not priced: " + ("no configuration fits the host memory" if best is None else best[2].unpriced)
    elif best[2].word == "undecided":
        lo, hi = best[2].ttft_interval
        why = (f"undecided: the best configuration's TTFT change {best[2].ttft_change_pct:+.2f}% has the interval "
               f"[{lo:+.2f}%, {hi:+.2f}%], which spans zero")
    else:
        adder = next(r for r in rows if r[1]["hit_rate"] > off_hit_rate and r[2].service is not None)
        svc = adder[2].service
        saved = adder[2].net_benefit_seconds + svc["total"] - svc["compute"]
        why = (f"transfers too dear: the best configuration that adds hits ({adder[0].label()}) saves {saved:,.2f} s of prefill but its L2 path, loads, "
               f"backups and interference cost {svc['total'] - svc['compute']:,.2f} s")
    return dict(on=False, pick=None, best=best, reason=why)
