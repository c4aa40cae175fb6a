"""What counts as a number in a profile, and in every hal argument: one rule, kept at the bottom.

Whole numbers are Python or numpy integers, never bools (True is an int to Python, never a size to
us). Profiles sit below hal (hal's backends price plans with them), so the rule lives here and
hal.common.arg_checks builds its argument checks on it.
"""

from __future__ import annotations

import operator

import numpy as np


def whole(value) -> int | None:
    """`value` as a plain int when it is a whole number (not a bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def is_int(value) -> bool:
    """True for a whole number (Python or numpy int), False for bools and everything else."""
    return whole(value) is not None


def is_number(value) -> bool:
    """True for an int or float (numpy's too), False for bools and everything else."""
    return is_int(value) or isinstance(value, float | np.floating)


def non_negative_int(name: str, value) -> int:
    """`value` as an int if it is a whole number >= 0, else a ValueError naming `name`."""
    n = whole(value)
    if n is None or n < 0:
        raise ValueError(f"{name}: {value!r} is not a non-negative integer")
    return n
