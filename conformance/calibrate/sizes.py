"""The transfer sizes a calibration times, refused before anything is allocated: at least two
distinct sizes (a line needs two points), none above MAX_SIZE, all buffers within this machine;
and the host regions of the translation fit, each at least a huge page, within this machine."""

from __future__ import annotations

from conformance.calibrate.host_costs import budget_check
from conformance.common import args as arg_types
from conformance.common.errors import CliError, clip
from hal.memory.budget import refuse_over
from hal.memory.vm import HUGE_PAGE

MAX_SIZE = 1 << 30
MIN_SIZE = 4096


def transfer_sizes(text: str, option: str = "--sizes") -> list[int]:
    """The distinct sizes of a comma list (hal.common.units), increasing; CliError naming `option`."""
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


def region_sizes(text: str, option: str = "--translation-sizes") -> list[int]:
    """The distinct host region sizes of a comma list, increasing, each at least a huge page;
    CliError naming `option`, also when two of the largest would not fit this machine."""
    parse = arg_types.size(minimum=HUGE_PAGE)
    try:
        sizes = sorted({parse(part.strip()) for part in text.split(",") if part.strip()})
    except Exception as e:  # argparse.ArgumentTypeError
        raise CliError(option, str(e)) from None
    if not sizes:
        raise CliError(option, f"need at least one size, got {clip(repr(text))}")
    budget_check(option, sizes)  # ValueError "<option>: ...", as refuse_over above
    return sizes
