"""The one price of a transfer: every modeled second of moving KV, host link (L2) or L3 store, comes
from `seconds` here.

Counted costs (launches, merged segments or kernel items, L3 batches and objects) at a profile's
per-count price, plus the bytes at the link's rate times a host-state bandwidth factor. The factor
is where the host state (NUMA placement, translation entries, PCIe ordering) enters, and only here:
hicache_ref.sim.price.mechanisms computes it from a HostState and prices through these functions, and
hal's modeled clock (hal/backends/support/modeled_clock.py) prices each plan through them with the
factors its caller set. So a replay's clock and its net benefit are the same arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass


class UnknownValue(ValueError):
    """A term with work to price needs a value the profile leaves unknown; `key` names it."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"no {key}")


@dataclass(frozen=True)
class BandwidthFactors:
    """What the host state does to DMA bandwidth, per direction (1.0: the link's own rate)."""

    h2d: float = 1.0
    d2h: float = 1.0

    def of(self, direction: str) -> float:
        return self.d2h if direction == "d2h" else self.h2d


LINK_RATE = BandwidthFactors()  # no host-state effect


def seconds(counted=(), nbytes: int = 0, gbps: float | None = None, gbps_key: str = "", factor: float = 1.0) -> float:
    """Sum of count x cost_us x 1e-6 over `counted` ((count, cost_us, key) triples), plus `nbytes` at
    `gbps` x `factor` decimal GB/s. UnknownValue naming the key of a needed cost that is None."""
    total = 0.0
    for count, cost_us, key in counted:
        if count:
            if cost_us is None:
                raise UnknownValue(key)
            total += count * cost_us * 1e-6
    if nbytes:
        if gbps is None:
            raise UnknownValue(gbps_key)
        total += nbytes / (gbps * factor * 1e9)
    return total


def submission_seconds(link, launches: int, segments: int, kernel: bool) -> float:
    """CPU time to submit host-link copies: per launch, plus per merged segment for direct copies."""
    counted = [(launches, link.per_launch_us, "link.per_launch_us")]
    if not kernel:
        counted.append((segments, link.per_segment_us, "link.per_segment_us"))
    return seconds(counted)


def device_seconds(link, direction: str, nbytes: int, items: int, kernel: bool, factor: float = 1.0) -> float:
    """Time a host-link copy occupies the link: bytes at the direction's rate x `factor`, plus per
    item (one token of one layer) for kernel copies."""
    gbps = link.h2d_gbps if direction == "h2d" else link.d2h_gbps
    counted = [(items, link.kernel_per_item_us, "link.kernel_per_item_us")] if kernel else []
    return seconds(counted, nbytes, gbps, f"link.{direction}_gbps", factor)


def host_link_seconds(link, direction: str, nbytes: int, segments: int, launches: int, items: int = 0,
                      kernel: bool = False, factor: float = 1.0) -> float:
    """A host-link transfer's whole price: its submission plus its device time (the two parts
    hicache_ref.sim.price.mechanisms charges apart, added the same way)."""
    return submission_seconds(link, launches, segments, kernel) + device_seconds(link, direction, nbytes, items,
                                                                                 kernel, factor)


def l3_seconds(l3_link, direction: str, objects: int, nbytes: int, batches: int) -> float:
    """Seconds the L3 store's link (an L3LinkModel) is busy moving `objects` objects of `nbytes` in all,
    in `batches` batches, `direction` "read" or "write": a round trip per batch, a cost per object,
    the bytes at the direction's rate."""
    gbps = l3_link.read_gbps if direction == "read" else l3_link.write_gbps
    return seconds(((batches, l3_link.per_batch_us, "l3_link.per_batch_us"),
                    (objects, l3_link.per_object_us, "l3_link.per_object_us")),
                   nbytes, gbps, f"l3_link.{direction}_gbps")
