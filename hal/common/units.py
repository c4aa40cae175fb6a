"""Sizes and counts given on the command line, read one way everywhere.

K, M, G, T (also KB, MB, ...) are powers of 1000 and KiB, MiB, GiB, TiB powers of 1024, matched
without regard to case; a plain integer is taken as is. `1.5G` is fine where the result is whole,
and `_` may group digits (`2_000_000`).
"""

from __future__ import annotations

import re
from decimal import Decimal

HELP = "K/M/G/T = powers of 1000 (32K = 32,000), KiB/MiB/GiB/TiB = powers of 1024 (32KiB = 32,768)"  # CLI help
_PREFIXES = "kmgt"
_SCALE = {
    "": 1, "b": 1,
    **{p: 1000 ** (i + 1) for i, p in enumerate(_PREFIXES)},
    **{p + "b": 1000 ** (i + 1) for i, p in enumerate(_PREFIXES)},
    **{p + "ib": 1024 ** (i + 1) for i, p in enumerate(_PREFIXES)},
}  # fmt: skip

_FORM = re.compile(r"\s*(\d+(?:_\d+)*(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


MAX_SIZE = (1 << 63) - 1


def parse_size(text: str | int, *, name: str, minimum: int = 0) -> int:
    """'80G' -> 80_000_000_000, '75GiB' -> 75 * 2**30, '4096' -> 4096; at least `minimum`.
    ValueError naming `name` (the argument) on anything else."""
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise ValueError(f"{name}: expected a size such as 4096, 80G or 75GiB, got {text!r}")
    if isinstance(text, int) and text < 0 or str(text).strip().startswith("-"):
        raise ValueError(f"{name}: a size must be non-negative, got {text!r}")
    m = _FORM.fullmatch(str(text))
    if not m or m.group(2).lower() not in _SCALE:
        raise ValueError(f"{name}: expected a whole number, optionally with a unit ({HELP}), "
                         f"such as 4096, 80G or 75GiB; got {text!r}")
    exact = Decimal(m.group(1).replace("_", "")) * _SCALE[m.group(2).lower()]
    if exact != exact.to_integral_value():
        raise ValueError(f"{name}: {text!r} is not a whole number")
    if exact > MAX_SIZE:  # past any byte or token count; a float of it would overflow later, naming nothing
        digits = len(m.group(1).replace("_", "").partition(".")[0].lstrip("0"))
        unit = f" {m.group(2)}" if m.group(2) else ""
        raise ValueError(f"{name}: at most {MAX_SIZE:,} (2**63 - 1), got a {digits:,}-digit number{unit}")
    value = int(exact)
    if value < minimum:
        bound = "positive" if minimum == 1 else f"at least {minimum}"
        raise ValueError(f"{name}: must be {bound}, got {text!r}")
    return value
