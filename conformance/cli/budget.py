"""The memory budget now lives in hal.memory.budget; these names stay importable until the
replay options (conformance/cli/replay.py) import it from there."""

from hal.memory.budget import BUDGET_ENV, GIB, USABLE_FRACTION, available_bytes, fmt, refuse_over

__all__ = ["BUDGET_ENV", "GIB", "USABLE_FRACTION", "available_bytes", "fmt", "refuse_over"]
