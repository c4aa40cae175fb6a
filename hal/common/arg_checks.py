"""Argument checks every hal entry point shares: one rule for counts and flags.

The bottom of hal (memory, topology and transfer use it), so a package of its own. Whole numbers
follow hardware_profiles.values, the layer below hal, so a count means the same in a profile and in
a hal call. Each check returns the value normalized (a plain int or bool) or raises a ValueError
that names the argument, so callers check before they change any state.
"""

from __future__ import annotations

import numpy as np

from hardware_profiles.values import is_int, is_number, non_negative_int, whole

__all__ = ["boolean", "is_int", "is_number", "non_negative_int", "positive_int"]


def positive_int(name: str, value) -> int:
    """`value` as an int if it is a whole number > 0, else a ValueError naming `name`."""
    n = whole(value)
    if n is None or n <= 0:
        raise ValueError(f"{name}: {value!r} is not a positive integer")
    return n


def boolean(name: str, value) -> bool:
    """`value` if it is a bool (numpy bools too), else a ValueError naming `name`."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise ValueError(f"{name}: {value!r} is not a bool (True or False)")
