"""argparse types shared by the subcommands: counts and sizes are read one way everywhere.

Each type raises argparse.ArgumentTypeError, so argparse reports `argument --NAME: <what>`,
which `conformance.cli.main` prints as the one line `hicache: --NAME: <what>`. Sizes go through
hal.common.units.parse_size (K/M/G powers of 1000, KiB/MiB/GiB powers of 1024).
"""

from __future__ import annotations

import argparse
import math
import sys

from conformance.common.errors import clip
from hal.common.units import parse_size
from hicache_ref.spec.fields import past_floats, too_many_digits


def _int(text: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        if (digits := too_many_digits(text)) is not None:
            raise argparse.ArgumentTypeError(f"a {digits:,}-digit number is past any count here") from None
        raise argparse.ArgumentTypeError(f"expected a whole number, got {clip(repr(text))}") from None


def count(minimum: int = 1, maximum: int | None = None, why: str = ""):
    """A whole number in [minimum, maximum]; `why` says where the maximum comes from."""
    def parse(text: str) -> int:
        value = _int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError("must be positive, got " + clip(text) if minimum == 1
                                             else f"must be at least {minimum}, got {clip(text)}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"at most {maximum:,}{why}, got {clip(text)}")
        return value

    parse.__name__ = "count"
    return parse


def _real(text: str, what: str) -> float:
    try:
        return float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {clip(repr(text))}") from None


def positive_real(what: str = "a number", maximum: float | None = None, unit: str = "", minimum: float | None = None):
    """A positive finite number, at least `minimum` and at most `maximum`; `what` names it in the
    error ("a ratio such as 2")."""
    def parse(text: str) -> float:
        value = _real(text, what)
        if past_floats(text, value):
            raise argparse.ArgumentTypeError(f"past the largest number a float holds (~1.8e308), got {clip(text)}")
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive number, got {clip(text)}")
        if value < sys.float_info.min:  # subnormal: its reciprocal (a rate's interval) overflows
            raise argparse.ArgumentTypeError(f"too small to compute with (at least {sys.float_info.min:.3g}), "
                                             f"got {clip(text)}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"at least {minimum:g}{unit}, got {clip(text)}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"at most {maximum:,g}{unit}, got {clip(text)}")
        return value

    parse.__name__ = "positive_real"
    return parse


def decimal(maximum: float, unit: str = ""):
    """A positive finite decimal number ("30", "2.5", "0.25") at most `maximum`."""
    return positive_real("a positive number such as 30 or 2.5", maximum, unit)


def unit_interval(what: str = "a number", top_open: bool = False):
    """A number in [0, 1] (or [0, 1) with `top_open`): a fraction, a gain, an R^2."""
    span = "[0, 1)" if top_open else "[0, 1]"

    def parse(text: str) -> float:
        value = _real(text, f"{what} in {span}")
        if not (0 <= value < 1 if top_open else 0 <= value <= 1):
            raise argparse.ArgumentTypeError(f"expected {what} in {span}, got {clip(text)}")
        return value

    parse.__name__ = "unit_interval"
    return parse


def size(minimum: int = 1):
    """A size or token count as hal.common.units reads it ("32K", "2M", "75GiB", "4096"), >= minimum."""
    def parse(text: str) -> int:
        try:
            return parse_size(text, name="", minimum=minimum)
        except ValueError as e:
            raise argparse.ArgumentTypeError(clip(str(e).removeprefix(": "), 160)) from None

    parse.__name__ = "size"
    return parse


# Geometry bounds: far above any model (DeepSeek-V3 has 61 layers, SGLang pages are 1..256
# tokens) and low enough that a typo is refused before it sizes an array.
MAX_LAYERS = 4096
MAX_PAGE_SIZE = 1 << 16
MAX_DIM = 1 << 16
MAX_HEADS = 1024
layers = count(1, MAX_LAYERS, " (the largest model has a few hundred layers)")
page_size = count(1, MAX_PAGE_SIZE, " tokens")
dim = count(1, MAX_DIM)
heads = count(1, MAX_HEADS)
positive = count(1)
