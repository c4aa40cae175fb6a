"""Where each rank of a local group is, in memory its launcher reads: a rank that stops moving is
reported with the place it stopped at (its phase and op), not as a silent hang.

Every rank writes its own row of a shared int64 array: (phase, op, marks). The launcher takes a
row that has not changed for a collective timeout plus a margin for a stuck rank: every
collective is bounded by that timeout, and one op's own work takes milliseconds.
"""

from __future__ import annotations

PHASES = ("starting", "rendezvous", "host pool setup", "op", "final check", "gathering figures", "teardown")
FIELDS = 3  # phase index, last op begun (-1: none yet), marks so far


class Progress:
    """Rank `rank`'s row of `cells` (a shared int64 array of FIELDS per rank); None: a no-op."""

    def __init__(self, cells=None, rank: int = 0):
        self.cells, self.base = cells, rank * FIELDS

    def mark(self, phase: str, op: int | None = None) -> None:
        """This rank entered `phase` (of PHASES); `op`: the op it began, kept until the next one."""
        if self.cells is None:
            return
        c, b = self.cells, self.base
        c[b] = PHASES.index(phase)
        if op is not None:
            c[b + 1] = op
        c[b + 2] += 1


def new_cells(ctx, ranks: int):
    """The shared rows of `ranks` ranks, every one at "starting" with no op begun."""
    cells = ctx.RawArray("q", FIELDS * ranks)
    for r in range(ranks):
        cells[r * FIELDS + 1] = -1
    return cells


def row(cells, rank: int) -> tuple[int, int, int]:
    b = rank * FIELDS
    return cells[b], cells[b + 1], cells[b + 2]


def where(cells, rank: int) -> str:
    """Rank `rank`'s place in words: "op 45", "rendezvous", "teardown after op 119"."""
    phase, op, _ = row(cells, rank)
    name = PHASES[phase] if 0 <= phase < len(PHASES) else f"phase {phase}"
    if name == "op":
        return f"op {op}"
    return name if op < 0 else f"{name} after op {op}"
