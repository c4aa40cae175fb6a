"""How a profile's values are checked: the range each number must lie in, and the errors that name
what was refused.

A dataclass of the profile checks its own numbers against its table of `Bound`s (`check_bounded`),
so a value built in code and one read from YAML are refused by the same check with the same words:
a `FieldError` naming the field, which the YAML reader turns into a `ProfileError` naming the file
and key path. The bounds also catch a value written in the wrong unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hardware_profiles.values import is_int, is_number


class ProfileError(ValueError):
    """A profile that cannot be used: "<file>: <key.path>: expected <what>, got <repr>"."""

    def __init__(self, file: str, key_path: str, expected: str, got: str):
        self.file, self.key_path, self.expected, self.got = str(file), key_path, expected, got
        super().__init__(f"{self.file}: {key_path}: expected {expected}, got {clip_echo(got)}")


ECHO_CHARS = 80  # how much of a bad value a message echoes


def clip_echo(got: str) -> str:
    """`got` as a message echoes it: at most ECHO_CHARS characters, then how long it was (a
    non-profile file given as --profile must not be printed whole)."""
    got = str(got)
    if len(got) <= ECHO_CHARS:
        return got
    return f"{got[: ECHO_CHARS - 3]}... ({len(got):,} characters)"


class FieldError(ValueError):
    """A profile value refused by its dataclass: "<field>: expected <what>, got <repr>".

    The YAML reader turns it into a ProfileError with the file and key path, so a value built
    directly and one read from a file are refused by the same check with the same words.
    """

    def __init__(self, field_name: str, expected: str, got: str):
        self.field, self.expected, self.got = field_name, expected, got
        super().__init__(f"{field_name}: expected {expected}, got {got}")


@dataclass(frozen=True)
class Bound:
    """The range a profile number must lie in; the bounds also catch values in the wrong unit."""

    unit: str
    lo: float
    hi: float
    integer: bool = False
    lo_open: bool = False

    def expected(self) -> str:
        kind = "an integer" if self.integer else "a number"
        return f"{kind} of {self.unit} in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}] or 'unknown'"

    def check(self, field_name: str, raw):
        """`raw` as an int or float, or a FieldError naming `field_name`."""
        wrong_type = not (is_int(raw) if self.integer else is_number(raw))
        if wrong_type or not math.isfinite(raw) or not self.lo <= raw <= self.hi or (self.lo_open and raw == self.lo):
            hint = "" if wrong_type else " (check the unit)"
            raise FieldError(field_name, self.expected() + hint, repr(raw))
        return int(raw) if self.integer else float(raw)


LINK_BOUNDS = {
    "h2d_gbps": Bound("GB/s", 0, 1000, lo_open=True),
    "d2h_gbps": Bound("GB/s", 0, 1000, lo_open=True),
    "per_segment_us": Bound("microseconds", 0, 10_000),
    "per_launch_us": Bound("microseconds", 0, 100_000),
    "registration_s_per_gib": Bound("seconds per GiB", 0, 1000),
}
# Optional link keys (a profile without them leaves them unknown): the kernel io path, and the
# largest host range the driver registers in one call (the xpu backend's per-buffer limit).
KERNEL_BOUNDS = {
    "kernel_per_item_us": Bound("microseconds", 0, 1000),
    "max_registration_bytes": Bound("bytes", 0, 2.0**50, integer=True, lo_open=True),
}
COMPUTE_BOUNDS = {
    "prefill_fixed_s": Bound("seconds", 0, 3600),
    # an upper bound of 1 s/token catches a value written in ms or us
    "prefill_per_token_s": Bound("seconds per token", 0, 1),
}
# Optional compute keys: the attention term of prefill (each uncached token attends to every token
# before it) and the fixed cost of a request's L2 load path (hicache_ref.sim.price.mechanisms).
COMPUTE_OPTIONAL_BOUNDS = {
    "prefill_per_token_pair_s": Bound("seconds per token pair", 0, 1e-3),
    "l2_path_fixed_s": Bound("seconds", 0, 3600),
    # the first-principles prefill (hicache_ref.sim.price.prefill_model) where the terms above are unknown:
    # the share of the device's peak a prefill sustains, and the TP group its FLOPs are split over
    "prefill_mfu": Bound("fraction of peak FLOPS", 0, 1, lo_open=True),
    "prefill_tp": Bound("TP ranks", 1, 1024, integer=True),
}
# Optional device keys: public datasheet figures, what a first-principles prefill and the host
# link's ceiling are computed from.
DEVICE_OPTIONAL_BOUNDS = {
    "peak_bf16_tflops": Bound("dense bf16 TFLOPS", 0, 100_000, lo_open=True),
    "hbm_gbps": Bound("GB/s", 0, 100_000, lo_open=True),
    "host_link_gbps": Bound("GB/s per direction", 0, 1000, lo_open=True),
}
# Optional `host_costs` section: the host-side mechanisms the link model alone does not show
# (hicache_ref.sim.price.mechanisms prices them; docs/model.md says what each is).
HOST_COST_BOUNDS = {
    "submit_contention": Bound("fraction of submission time", 0, 1),
    "d2h_interference": Bound("fraction of D2H device time", 0, 1),
    "translation_slowdown_per_mentry": Bound("DMA slowdown per million translation entries", 0, 10),
    "registered_slowdown_per_gb": Bound("DMA slowdown per GB of registered host memory", 0, 1),
    "numa_remote_bw_factor": Bound("fraction of DMA bandwidth", 0, 1, lo_open=True),
    "ido_shared_d2h_factor": Bound("fraction of D2H bandwidth", 0, 1, lo_open=True),
}


# Optional `l3_link` section: the L3 store's link (a pooled-DRAM store reached over the NIC, Mooncake's
# transfer engine) and the one uplink L3 traffic shares with L2 write-back (hicache_ref.sim.price.mechanisms).
L3_LINK_BOUNDS = {
    "read_gbps": Bound("GB/s", 0, 10_000, lo_open=True),
    "write_gbps": Bound("GB/s", 0, 10_000, lo_open=True),
    "per_batch_us": Bound("microseconds", 0, 1_000_000),
    "per_object_us": Bound("microseconds", 0, 100_000),
    "uplink_gbps": Bound("GB/s", 0, 10_000, lo_open=True),
}


def check_bounded(obj, bounds: dict[str, Bound]) -> None:
    for name, bound in bounds.items():
        value = getattr(obj, name)
        if value is not None:
            object.__setattr__(obj, name, bound.check(name, value))
