"""The memory budget lives in the library (hicache_ref.spec.memory); the commands that size their own
buffers (calibrate, plan, bench) call it from here."""

from hicache_ref.spec.memory import BUDGET_ENV, USABLE_FRACTION, available_bytes, fmt, refuse_over  # noqa: F401
