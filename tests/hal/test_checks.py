"""hal.common.arg_checks: the one rule for counts and flags (numpy ints yes, bools never a number)."""

import numpy as np
import pytest

from hal.common.arg_checks import boolean, is_int, is_number, non_negative_int, positive_int


def test_positive_and_non_negative_ints():
    assert positive_int("n", 3) == 3 and positive_int("n", np.int32(3)) == 3
    assert type(positive_int("n", np.int64(3))) is int
    assert non_negative_int("n", 0) == 0 and non_negative_int("n", np.uint8(7)) == 7
    for bad in (0, -1, True, 1.0, "1", None):
        with pytest.raises(ValueError, match="^size: "):
            positive_int("size", bad)
    for bad in (-1, False, 0.5, "0"):
        with pytest.raises(ValueError, match="^count: "):
            non_negative_int("count", bad)


def test_booleans_and_predicates():
    assert boolean("flag", True) is True and boolean("flag", np.bool_(False)) is False
    for bad in (0, 1, "yes", None):
        with pytest.raises(ValueError, match="^flag: "):
            boolean("flag", bad)
    assert is_int(np.int64(1)) and not is_int(True) and not is_int(1.0)
    assert is_number(1.5) and is_number(2) and is_number(np.float32(1)) and not is_number(False) and not is_number("1")
