"""The modeled clock: what a plan costs on a profile's link model, and a stream's modeled time.

Emu and count price plans here, so both give the same modeled seconds for the same plan: emu next
to its real copies, count instead of them.
"""

from __future__ import annotations

from typing import Any

from hal.transfer.direction import Direction
from hal.transfer.plan import TransferPlan
from hardware_profiles.transfer_price import LINK_RATE, BandwidthFactors


def modeled_profile(profile: Any, default: str) -> Any:
    """The profile a modeled clock prices with: the one given, else the backend's default
    (a modeled backend without a link model could not price anything)."""
    if profile is not None:
        return profile
    from hardware_profiles.loader import load_profile

    return load_profile(default)


def plan_seconds(link: Any, plan: TransferPlan, factors: BandwidthFactors = LINK_RATE) -> float | None:
    """Modeled seconds of `plan` on `link` (a hardware_profiles LinkModel, priced by
    hardware_profiles.transfer_price with the host state's bandwidth `factors`), or None when the profile
    leaves a needed value unknown. A kernel plan (`kernel_items` set) is priced per launch and
    item, a direct one per launch and merged segment. Device-to-device and host-to-host copies do
    not cross the host link the model prices: 0."""
    if (not plan.groups and plan.totals is None) or plan.direction in (Direction.D2D, Direction.H2H):
        return 0.0
    factor = factors.of(plan.direction)
    if plan.kernel_items is not None:  # kernel io backend: launches and items, no descriptors
        return link.kernel_seconds(plan.direction, plan.nbytes, plan.kernel_items, plan.launches, factor)
    return link.seconds(plan.direction, plan.nbytes, plan.num_segments, plan.launches, factor)


class HostFactorsMixin:
    """A modeled backend's host state as bandwidth factors (hardware_profiles.transfer_price): the link's own
    rate until a caller that knows the host state (a replay: its registered pool) sets them, so the
    clock prices a plan as the simulator prices the same traffic."""

    host_factors: BandwidthFactors = LINK_RATE

    def set_host_factors(self, factors: BandwidthFactors) -> None:
        if not isinstance(factors, BandwidthFactors):
            raise ValueError(f"factors: expected a BandwidthFactors, got {type(factors).__name__}")
        self.host_factors = factors


class ModeledClock:
    """One stream's position in modeled seconds. Once a plan could not be priced the clock is
    unknown from then on (readings are None) rather than silently short."""

    def __init__(self) -> None:
        self.now = 0.0
        self.known = True

    def advance(self, seconds: float | None) -> None:
        """Account one executed plan of `seconds` (None: not modeled)."""
        if seconds is None:
            self.known = False
        else:
            self.now += seconds

    def wait_until(self, seconds: float | None) -> None:
        """Later work starts no earlier than `seconds` (another stream's event)."""
        if seconds is not None:
            self.now = max(self.now, seconds)

    def reading(self) -> float | None:
        return self.now if self.known else None
