"""The cost of moving KV across tiers, cause by cause: what keeps the prefill server busy.

Every cost is a mechanism with parameters from the profile (link, compute, host_costs):
prefill compute of the uncached tokens; the L2 load path; DMA submission per segment and per
launch (direct copies) or per launch and item (kernel copies); bandwidth divided by the
translation entries of registered memory (bytes / host page size, so THP changes it) and by the
registered bytes themselves, cut by remote NUMA memory, and cut by two cards of one uplink writing
to different nodes without IDO; inline submission holding the scheduler; a daemon thread's
submission contending with it; D2H device time interfering with prefill. The derivations of the parameters: hicache_ref/sim/fit/derive.py.
The model in words: docs/model.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hardware_profiles import transfer_price

PAGE_4K, PAGE_THP = 4096, 2 << 20  # host page sizes: base pages, transparent huge pages
SUBMISSIONS = ("inline", "daemon")
# local: each card's pool on its uplink's node (both cards of a switch on one node); remote: on
# another node; interleave: pages spread over every node (a TP-shared pool); one_to_one: card i on
# node i, so the two cards behind one uplink write to different nodes.
NUMA_PLACEMENTS = ("local", "remote", "interleave", "one_to_one")


@dataclass(frozen=True)
class HostState:
    """What a replay does not see: who submits, the host page size, where host memory sits,
    PCIe ordering, how many cards behind one uplink write at once, what each card registers."""

    submission: str = "daemon"  # inline: on the scheduler thread; daemon: a backup thread
    host_page_bytes: int = PAGE_THP
    numa: str = "local"  # one of NUMA_PLACEMENTS
    ido: bool = True  # PCIe ID-based ordering on the shared uplink
    writers_per_uplink: int = 1  # cards behind one uplink that write D2H at the same time
    registered_bytes: int = 0  # host memory registered by each card
    numa_nodes: int = 1

    def __post_init__(self):
        if self.submission not in SUBMISSIONS:
            raise ValueError(f"submission: expected one of {', '.join(SUBMISSIONS)}, got {self.submission!r}")
        if self.numa not in NUMA_PLACEMENTS:
            raise ValueError(f"numa: expected one of {', '.join(NUMA_PLACEMENTS)}, got {self.numa!r}")
        for name in ("host_page_bytes", "writers_per_uplink", "numa_nodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive integer, got {v!r}")
        if isinstance(self.registered_bytes, bool) or not isinstance(self.registered_bytes, int) \
                or self.registered_bytes < 0:
            raise ValueError(f"registered_bytes: expected a non-negative integer, got {self.registered_bytes!r}")

    @property
    def translation_entries(self) -> int:
        """Page-table entries the registered memory takes (what DMA translation walks)."""
        return -(-self.registered_bytes // self.host_page_bytes)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Traffic:
    """What one direction moved: bytes, merged segments, launches, and whether by kernel copies
    (then `items`, one per token and layer, are priced instead of segments)."""

    bytes: int = 0
    segments: int = 0
    launches: int = 0
    items: int = 0
    kernel: bool = False


class Unpriced(ValueError):
    """A mechanism needs a profile value that is unknown; the message names the key."""


def need(value, key: str, profile):
    """`value`, or Unpriced naming the profile `key` when it is unknown."""
    if value is None:
        raise Unpriced(f"profile {profile.name} has no {key}")
    return value


def numa_factor(profile, state: HostState) -> float:
    """DMA bandwidth factor of where host memory sits: 1 local and 1 interleaved (seed work (P800
    acceptance runs): with the TP group's shared pool interleaved over all nodes, binding each card to
    its node becomes optional, so interleaved memory costs no more than local); the remote factor on a
    remote node and under one-to-one binding (half the cards' pools sit off their uplink's node, and
    a TP group runs at the pace of its slowest card)."""
    if state.numa in ("local", "interleave") or (state.numa == "one_to_one" and state.numa_nodes == 1):
        return 1.0
    return need(profile.host_costs.numa_remote_bw_factor, "host_costs.numa_remote_bw_factor", profile)


def strict_ordering(state: HostState) -> bool:
    """Whether two cards' D2H writes block each other: they share an uplink, write at once, to
    different NUMA nodes (one-to-one binding), with strict PCIe ordering. Seed work (P800
    acceptance runs): ID-based ordering is the fix for one-to-one binding, where forcing every node
    collapsed D2H bandwidth."""
    return state.writers_per_uplink > 1 and not state.ido and state.numa == "one_to_one"


def bandwidth_factor(profile, direction: str, state: HostState) -> float:
    """What `state` does to DMA bandwidth of `direction` ("h2d" or "d2h"): the NUMA factor, divided by
    the translation and registration slowdown of the registered memory, and for D2H times the
    ordering factor when cards behind one uplink write at once to different nodes without IDO."""
    hc = profile.host_costs
    f = numa_factor(profile, state)
    if state.translation_entries:
        rho = need(hc.translation_slowdown_per_mentry, "host_costs.translation_slowdown_per_mentry", profile)
        sigma = need(hc.registered_slowdown_per_gb, "host_costs.registered_slowdown_per_gb", profile)
        # Seed work (P800 acceptance runs): registered size is itself a cost that slows DMA, beyond
        # the page-table entries huge pages remove; so a pool past the hit-rate plateau is slower.
        f /= 1.0 + rho * state.translation_entries / 1e6 + sigma * state.registered_bytes / 1e9
    if direction == "d2h" and strict_ordering(state):
        f *= need(hc.ido_shared_d2h_factor, "host_costs.ido_shared_d2h_factor", profile)
    return f


def bandwidth_factors(profile, state: HostState) -> transfer_price.BandwidthFactors:
    """Both directions' bandwidth factors of `state`: what a modeled backend's clock prices with
    (hal/backends/support/modeled_clock.py), so it agrees with `device_seconds`."""
    return transfer_price.BandwidthFactors(h2d=bandwidth_factor(profile, "h2d", state),
                                    d2h=bandwidth_factor(profile, "d2h", state))


def priced(profile, price, *args):
    """`price(*args)` (a hardware_profiles.transfer_price function), Unpriced naming the key it lacks."""
    try:
        return price(*args)
    except transfer_price.UnknownValue as e:
        raise Unpriced(f"profile {profile.name} has no {e.key}") from None


def dma_gbps(profile, direction: str, state: HostState) -> float:
    """Effective DMA bandwidth (decimal GB/s) of `direction` ("h2d" or "d2h") under `state`."""
    bw = need(profile.link.h2d_gbps if direction == "h2d" else profile.link.d2h_gbps, f"link.{direction}_gbps",
              profile)
    return bw * bandwidth_factor(profile, direction, state)


def submission_seconds(profile, t: Traffic) -> float:
    """CPU time to submit the copies: per launch, plus per merged segment for direct copies."""
    return priced(profile, transfer_price.submission_seconds, profile.link, t.launches, t.segments, t.kernel)


def device_seconds(profile, direction: str, t: Traffic, state: HostState) -> float:
    """Time the copy occupies the link: bytes at the effective bandwidth, plus per item for kernels."""
    factor = bandwidth_factor(profile, direction, state) if t.bytes else 1.0
    return priced(profile, transfer_price.device_seconds, profile.link, direction, t.bytes, t.items, t.kernel, factor)


@dataclass(frozen=True)
class Service:
    """Seconds the prefill server is busy, by cause (each term is one mechanism)."""

    compute: float  # prefill of the uncached tokens
    l2_path: float  # the fixed cost of each request that loads from L2
    load: float  # H2D of the hits: submitted and waited for before prefill
    hold: float  # the scheduler held by D2H submission (inline) or contending with it (daemon)
    interference: float  # D2H device time that overlaps prefill and slows it
    l3: float = 0.0  # L3 prefetches waited past their slack, and the uplink L3 shares with D2H (l3_service)

    @property
    def total(self) -> float:
        return self.compute + self.l2_path + self.load + self.hold + self.interference + self.l3

    def to_json(self) -> dict:
        return {**asdict(self), "total": self.total}


def backup_seconds(profile, d2h: Traffic, state: HostState) -> tuple[float, float]:
    """(hold, interference) of D2H backups. Inline: the scheduler waits for the submission and
    the copy runs while it waits, so only device time beyond the submission interferes. Daemon: the
    scheduler loses the contention share of the submission, and all device time may interfere."""
    if not (d2h.bytes or d2h.launches):
        return 0.0, 0.0
    sub = submission_seconds(profile, d2h)
    dev = device_seconds(profile, "d2h", d2h, state)
    hc = profile.host_costs
    phi = need(hc.d2h_interference, "host_costs.d2h_interference", profile)
    if state.submission == "inline":
        return sub, phi * max(0.0, dev - sub)
    kappa = need(hc.submit_contention, "host_costs.submit_contention", profile)
    return kappa * sub, phi * dev


def l3_seconds(profile, direction: str, objects: int, nbytes: int, batches: int) -> float:
    """Seconds the L3 store's link (profile l3_link: Mooncake's transfer engine over the NIC) is busy
    moving `objects` objects of `nbytes` in all, in `batches` batches, `direction` "read" or "write"
    (hardware_profiles.transfer_price.l3_seconds, as the L3 tier's prefetch clock prices). Unpriced naming
    the key when the profile lacks one."""
    return priced(profile, transfer_price.l3_seconds, profile.l3_link, direction, objects, nbytes, batches)


def shared_uplink_seconds(profile, d2h_bytes: int, l3_bytes: int, l3_busy_s: float, state: HostState) -> float:
    """Seconds added when L2 write-back (D2H over PCIe) and L3 traffic (RDMA through the NIC behind the
    same uplink) run at once: their bytes together need (d2h + l3) / uplink_gbps, against the longer
    of the two alone (`l3_busy_s`: the L3 link's own seconds). Worst case: the two overlap for the
    whole run. Zero unless both move bytes; Unpriced naming l3_link.uplink_gbps when it is unknown."""
    if not (d2h_bytes and l3_bytes):
        return 0.0
    up = need(profile.l3_link.uplink_gbps, "l3_link.uplink_gbps", profile)
    alone = max(d2h_bytes / (dma_gbps(profile, "d2h", state) * 1e9), l3_busy_s)
    return max(0.0, (d2h_bytes + l3_bytes) / (up * 1e9) - alone)


def l3_service(profile, stall_s: float, shared_s: float) -> float:
    """What L3 costs the prefill server: the prefetch stalls past their slack (on the request path),
    and the uplink contention's share that slows D2H into prefill (as D2H interference does)."""
    if not shared_s:
        return float(stall_s)
    return float(stall_s) + need(profile.host_costs.d2h_interference, "host_costs.d2h_interference", profile) * shared_s


def service(profile, compute_s: float, l2_hit_requests: int, h2d: Traffic, d2h: Traffic,
            state: HostState, l3_s: float = 0.0) -> Service:
    """The server's busy seconds for a run with `compute_s` of prefill and the traffic given.
    Unpriced (naming the profile key) when a mechanism with work to price has no parameter."""
    l2_path = 0.0
    if l2_hit_requests:
        l2_path = l2_hit_requests * need(profile.compute.l2_path_fixed_s, "compute.l2_path_fixed_s", profile)
    load = submission_seconds(profile, h2d) + device_seconds(profile, "h2d", h2d, state) if h2d.bytes else 0.0
    hold, interference = backup_seconds(profile, d2h, state)
    return Service(float(compute_s), l2_path, load, hold, interference, float(l3_s))


def mean_ttft_seconds(busy_s: float, requests: int, concurrency: int | None) -> float:
    """Mean time to first token of `requests` served by one prefill server kept busy by a closed
    loop of `concurrency` clients (each sends its next request when its last one is prefilled, as
    a PD prefill node releases it): by Little's law concurrency x busy / requests. Serial (None): each
    request alone, busy / requests. Every second the scheduler is held is waited by all in flight."""
    if not requests:
        return 0.0
    return (concurrency or 1) * busy_s / requests
