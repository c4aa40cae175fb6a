"""What a profile prices with: the host link, prefill compute, the host-side mechanisms and the L3
store's link, each a frozen dataclass whose unknown values are None.

A figure none of them can price is None, never an invented number, so consumers report "not
modeled". The arithmetic of a host-link transfer is hardware_profiles.transfer_price; the units and
ranges each value must lie in, hardware_profiles.field_checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware_profiles import transfer_price
from hardware_profiles.field_checks import (
    COMPUTE_BOUNDS,
    COMPUTE_OPTIONAL_BOUNDS,
    HOST_COST_BOUNDS,
    KERNEL_BOUNDS,
    L3_LINK_BOUNDS,
    LINK_BOUNDS,
    check_bounded,
)
from hardware_profiles.values import non_negative_int

# The values of hal.transfer.direction.Direction (a str enum, so its members compare equal): a
# profile prices the two that cross the host link and knows the other two do not.
DIRECTIONS = ("h2d", "d2h", "d2d", "h2h")
HOST_LINK_DIRECTIONS = ("h2d", "d2h")


@dataclass(frozen=True)
class LinkModel:
    """Host link cost. Direct copies (io_backend "direct"): per launch + per segment (DMA
    descriptor) + bytes / bandwidth. Kernel copies (io_backend "kernel", `kernel_seconds`):
    per launch + per item (one token of one layer, what upstream's transfer kernels copy
    through their index tables) + bytes / bandwidth, no descriptors."""

    h2d_gbps: float | None  # decimal GB/s (1e9 bytes per second)
    d2h_gbps: float | None
    per_segment_us: float | None
    per_launch_us: float | None
    registration_s_per_gib: float | None
    kernel_per_item_us: float | None = None  # per token-layer item of a kernel copy
    max_registration_bytes: int | None = None  # one host registration's limit; None: the backend's default

    def __post_init__(self):
        check_bounded(self, LINK_BOUNDS)
        check_bounded(self, KERNEL_BOUNDS)

    def seconds(self, direction: str, nbytes: int, segments: int, launches: int = 1,
                factor: float = 1.0) -> float | None:
        """Modeled seconds for one transfer (hardware_profiles.transfer_price, the bytes at the link's rate x
        `factor`, the host state's), or None when it cannot be modeled.

        None when a term with a nonzero count needs a value the profile leaves unknown, and
        for d2d/h2h, which a host-link model does not cover: guessing would hide the gap.
        """
        return self._priced(direction, nbytes, segments, launches, 0, False, factor)

    def kernel_seconds(self, direction: str, nbytes: int, items: int, launches: int = 1,
                       factor: float = 1.0) -> float | None:
        """Modeled seconds for one kernel copy of `items` token-layer items in `launches` kernel
        launches, or None when it cannot be modeled (as `seconds`; no per-segment term)."""
        return self._priced(direction, nbytes, 0, launches, non_negative_int("items", items), True, factor)

    def _priced(self, direction, nbytes, segments, launches, items, kernel, factor) -> float | None:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction: expected one of {', '.join(DIRECTIONS)}, got {direction!r}")
        nbytes, segments, launches = (non_negative_int(name, n) for name, n in
                                      (("nbytes", nbytes), ("segments", segments), ("launches", launches)))
        if direction not in HOST_LINK_DIRECTIONS:
            return None
        try:
            return transfer_price.host_link_seconds(self, direction, nbytes, segments, launches, items, kernel, factor)
        except transfer_price.UnknownValue:
            return None

    def registration_seconds(self, nbytes: int) -> float | None:
        nbytes = non_negative_int("nbytes", nbytes)
        if nbytes == 0:
            return 0.0
        if self.registration_s_per_gib is None:
            return None
        return int(nbytes) / 2**30 * self.registration_s_per_gib


@dataclass(frozen=True)
class ComputeModel:
    """Prefill time of n prompt tokens of which c are cached: a measured curve when given (curve(n) -
    curve(c) + its fixed part), else fixed + per_token * (n - c) + per_token_pair * (n^2 - c^2) (each
    new token attends to all before it). l2_path_fixed: what a request that loads from L2 pays once."""

    prefill_fixed_s: float | None
    prefill_per_token_s: float | None
    prefill_curve: tuple[tuple[int, float], ...] | None = None  # (tokens, seconds), tokens ascending
    prefill_per_token_pair_s: float | None = None  # absent: 0 (a linear prefill)
    l2_path_fixed_s: float | None = None
    prefill_mfu: float | None = None  # first principles: share of peak a prefill sustains
    prefill_tp: int | None = None  # first principles: TP ranks the FLOPs are split over
    prefill_model: str | None = None  # first principles: the served model (hicache_ref.models preset)

    def __post_init__(self):
        check_bounded(self, COMPUTE_BOUNDS)
        check_bounded(self, COMPUTE_OPTIONAL_BOUNDS)

    @property
    def known(self) -> bool:
        """True when prefill time can be computed for any token count."""
        return bool(self.prefill_curve) or (self.prefill_fixed_s is not None and self.prefill_per_token_s is not None)

    def prefill_seconds(self, tokens: int, cached: int = 0) -> float | None:
        """Seconds to prefill a prompt of `tokens` whose first `cached` tokens' KV is on the device
        already (None when unknown; 0 for an empty prompt). The fixed part is paid by every prompt."""
        tokens = non_negative_int("tokens", tokens)
        cached = non_negative_int("cached", cached)
        if cached > tokens:
            raise ValueError(f"cached: {cached} exceeds tokens {tokens}")
        if tokens == 0:
            return 0.0
        if self.prefill_curve:
            fixed = _interpolate(self.prefill_curve, 0)
            if not cached:
                return _interpolate(self.prefill_curve, tokens)
            return fixed + max(0.0, _interpolate(self.prefill_curve, tokens) - _interpolate(self.prefill_curve, cached))
        if self.prefill_fixed_s is None or self.prefill_per_token_s is None:
            return None
        pair = self.prefill_per_token_pair_s or 0.0
        new = tokens - cached
        return self.prefill_fixed_s + self.prefill_per_token_s * new + pair * (tokens * tokens - cached * cached)


@dataclass(frozen=True)
class HostCosts:
    """Host-side mechanisms (hicache_ref.sim.price.mechanisms): the share of a daemon thread's submission
    time the scheduler still waits (contention), the share of D2H device time that delays prefill
    (interference), DMA slowdown per million translation entries of registered memory, the DMA
    bandwidth factor of remote NUMA memory, and the D2H factor when two cards behind one uplink
    write with strict (non-IDO) ordering. None: unknown."""

    submit_contention: float | None = None
    d2h_interference: float | None = None
    translation_slowdown_per_mentry: float | None = None
    registered_slowdown_per_gb: float | None = None
    numa_remote_bw_factor: float | None = None
    ido_shared_d2h_factor: float | None = None

    def __post_init__(self):
        check_bounded(self, HOST_COST_BOUNDS)


@dataclass(frozen=True)
class L3LinkModel:
    """The L3 store's link: streaming rate per direction, one round trip per batch, a cost per object
    (Mooncake's transfer engine posts one transfer per object), and the bandwidth of the host uplink
    that L3 traffic (RDMA through the NIC) shares with D2H write-back to L2. None: unknown."""

    read_gbps: float | None = None
    write_gbps: float | None = None
    per_batch_us: float | None = None
    per_object_us: float | None = None
    uplink_gbps: float | None = None

    def __post_init__(self):
        check_bounded(self, L3_LINK_BOUNDS)

    @property
    def known(self) -> bool:
        """Whether the store's transfers can be priced (rates and both latencies given)."""
        return None not in (self.read_gbps, self.write_gbps, self.per_batch_us, self.per_object_us)


def _interpolate(points: tuple[tuple[int, float], ...], x: int) -> float:
    """Piecewise linear through the points; outside them the nearest segment's line, floored at 0."""
    i = 1
    while i < len(points) - 1 and x > points[i][0]:
        i += 1
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))
