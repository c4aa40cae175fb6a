"""Upstream's lines that say nothing about this engine's runs, kept off stderr.

Importing SGLang warns that AWQ and GGUF quantization need a GPU (nothing here quantizes), and
its L2 transfer logs that CPU events do not time (the engine prices every copy itself: pricing).
Only those lines are dropped; every other warning and log record stays.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

_IMPORT_WARNINGS = r"Only .* support (AWQ|GGUF)"
_TIMING_LOGGER = "sglang.srt.mem_cache.l2_transfer"


class _DropTiming(logging.Filter):
    def filter(self, record):
        return "does not support timing" not in record.getMessage()


@contextlib.contextmanager
def quiet_import():
    """Around SGLang's import: its quantization warnings for a GPU-less host dropped, and its
    untimed-events record filtered from then on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_IMPORT_WARNINGS, category=UserWarning)
        yield
    logger = logging.getLogger(_TIMING_LOGGER)
    if not any(isinstance(f, _DropTiming) for f in logger.filters):
        logger.addFilter(_DropTiming())
