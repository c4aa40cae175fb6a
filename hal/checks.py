"""Argument checks every hal and profile entry point shares: one rule for counts and flags.

Whole numbers are Python or numpy integers, never bools (True is an int to Python, never a size
to us). Each check returns the value normalized (a plain int or bool) or raises a ValueError that
names the argument, so callers check before they change any state.
"""

from __future__ import annotations

import operator

import numpy as np


def _whole(value) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def is_int(value) -> bool:
    """True for a whole number (Python or numpy int), False for bools and everything else."""
    return _whole(value) is not None


def is_number(value) -> bool:
    """True for an int or float (numpy's too), False for bools and everything else."""
    return is_int(value) or isinstance(value, float | np.floating)


def positive_int(name: str, value) -> int:
    """`value` as an int if it is a whole number > 0, else a ValueError naming `name`."""
    n = _whole(value)
    if n is None or n <= 0:
        raise ValueError(f"{name}: {value!r} is not a positive integer")
    return n


def non_negative_int(name: str, value) -> int:
    """`value` as an int if it is a whole number >= 0, else a ValueError naming `name`."""
    n = _whole(value)
    if n is None or n < 0:
        raise ValueError(f"{name}: {value!r} is not a non-negative integer")
    return n


def boolean(name: str, value) -> bool:
    """`value` if it is a bool (numpy bools too), else a ValueError naming `name`."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise ValueError(f"{name}: {value!r} is not a bool (True or False)")
