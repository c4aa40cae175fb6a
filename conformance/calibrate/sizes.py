"""The transfer sizes a calibration times, refused before anything is allocated: at least two
distinct sizes (a line needs two points), none above MAX_SIZE, all buffers within this machine."""

from __future__ import annotations

from conformance.common import args as arg_types
from conformance.common.errors import CliError, clip
from hal.memory.budget import refuse_over

MAX_SIZE = 1 << 30
MIN_SIZE = 4096


def transfer_sizes(text: str, option: str = "--sizes") -> list[int]:
    """The distinct sizes of a comma list (hal.units), increasing; CliError naming `option`."""
    parse = arg_types.size(minimum=MIN_SIZE)
    try:
        sizes = sorted({parse(part.strip()) for part in text.split(",") if part.strip()})
    except Exception as e:  # argparse.ArgumentTypeError
        raise CliError(option, str(e)) from None
    if len(sizes) < 2:
        raise CliError(option, f"need at least two distinct sizes for a fit, got {clip(repr(text))}")
    if sizes[-1] > MAX_SIZE:
        raise CliError(option, f"at most {MAX_SIZE >> 30} GiB per transfer, got {sizes[-1]:,} bytes")
    # device + host buffers of the largest size and the memcpy peer's two
    refuse_over(option, 4 * sizes[-1], f"buffers for {sizes[-1]:,}-byte transfers")
    return sizes
