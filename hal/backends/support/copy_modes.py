"""How a CUDA-like backend turns a plan's segments into device copies: its copy modes.

`descriptor` issues one async copy per merged segment, so it shows the per-descriptor cost the seed
work measured. `gather` gathers rows above a segment limit and copies once: fast for running the
suite, wrong for measuring. One mode per instance: `copy_mode`, else $HICACHE_COPY_MODE, else gather.
"""

from __future__ import annotations

import os

DESCRIPTOR, GATHER = "descriptor", "gather"
COPY_MODES = (DESCRIPTOR, GATHER)
DEFAULT_COPY_MODE = GATHER
COPY_MODE_ENV = "HICACHE_COPY_MODE"
# In gather mode, up to this many segments a group is still copied descriptor by descriptor
# (layer_first runs are few, and one copy per run is already the cheapest).
DIRECT_SEGMENT_LIMIT = 64


def resolve_copy_mode(copy_mode: str | None = None, environ: dict | None = None) -> str:
    """The copy mode a backend instance gets: `copy_mode` if given, else $HICACHE_COPY_MODE,
    else the default. ValueError naming the argument (or the variable) for anything else."""
    if copy_mode is not None:
        if copy_mode not in COPY_MODES:
            raise ValueError(f"copy_mode: {copy_mode!r} is not one of {', '.join(COPY_MODES)}")
        return copy_mode
    env = (os.environ if environ is None else environ).get(COPY_MODE_ENV, "").strip()
    if not env:
        return DEFAULT_COPY_MODE
    if env not in COPY_MODES:
        raise ValueError(f"{COPY_MODE_ENV}: {env[:40]!r} is not one of {', '.join(COPY_MODES)}")
    return env


def copies_each_segment(copy_mode: str, segments: int) -> bool:
    """True when a group of `segments` merged segments is copied one async copy per segment;
    False when it is gathered into one copy."""
    return copy_mode == DESCRIPTOR or segments <= DIRECT_SEGMENT_LIMIT
