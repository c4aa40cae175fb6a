"""What a hardware profile holds: the dataclasses, the schema's constants and the metric names.

A profile says what a machine is, how its host link behaves, how fast it prefills and what a run
must reach. Values written `unknown` load as None, so consumers report "not modeled" instead of
computing with an invented number. The schema: hardware_profiles/README.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from hardware_profiles import transfer_price
from hardware_profiles.values import is_int, is_number, non_negative_int

SCHEMA_VERSION = 1
UNKNOWN = "unknown"
COMPARATORS = ("<=", ">=", "<", ">", "==")
# The values of hal.transfer.direction.Direction (a str enum, so its members compare equal): a
# profile prices the two that cross the host link and knows the other two do not.
DIRECTIONS = ("h2d", "d2h", "d2d", "h2h")
HOST_LINK_DIRECTIONS = ("h2d", "d2h")
IDO_STATES = ("on", "off", "unknown")

# Stable metric names that targets may use: name -> (unit, what is measured). Consumers
# measure these under the same names, so a target with a misspelt metric fails to load
# rather than never being checked.
METRICS: dict[str, tuple[str, str]] = {
    "plan_segments_layer_first_seed": ("segments", "segments in the seed transfer (hal.transfer.seed), host layout layer_first"),
    "plan_segments_page_first_direct_seed": ("segments", "segments in the seed transfer (hal.transfer.seed), page_first_direct"),
    "plan_seconds_seed": ("s", "wall time to build the seed transfer plan (page_first_direct)"),
    "h2d_gbps": ("GB/s", "host-to-device bandwidth of large registered transfers"),
    "d2h_gbps": ("GB/s", "device-to-host bandwidth of large registered transfers"),
    "transfer_ratio_vs_memcpy": ("ratio", "backend transfer throughput / plain memcpy throughput, same run"),
    "per_card_host_gib_local": ("GiB", "host memory one card can use with strictly NUMA-local binding"),
    "host_pool_page_bytes": ("B", "page size backing the host KV pool"),
    "d2h_submit_block_s": ("s", "longest time the scheduler thread blocks submitting a D2H backup"),
    "ghost_entry_bytes": ("B", "host memory per ghost-list entry"),
}

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


def _check_bounded(obj, bounds: dict[str, Bound]) -> None:
    for name, bound in bounds.items():
        value = getattr(obj, name)
        if value is not None:
            object.__setattr__(obj, name, bound.check(name, value))


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
        _check_bounded(self, LINK_BOUNDS)
        _check_bounded(self, KERNEL_BOUNDS)

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
        _check_bounded(self, COMPUTE_BOUNDS)
        _check_bounded(self, COMPUTE_OPTIONAL_BOUNDS)

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
        _check_bounded(self, HOST_COST_BOUNDS)


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
        _check_bounded(self, L3_LINK_BOUNDS)

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


@dataclass(frozen=True)
class DeviceSpec:
    model: str | None  # None: unknown, like every other value written `unknown`
    hbm_gib: float | None
    devices_per_node: int | None
    peak_bf16_tflops: float | None = None  # dense (no sparsity), per device
    hbm_gbps: float | None = None  # HBM bandwidth, decimal GB/s
    host_link_gbps: float | None = None  # the device's host interface, one direction: the H2D/D2H ceiling

    def __post_init__(self):
        _check_bounded(self, DEVICE_OPTIONAL_BOUNDS)


@dataclass(frozen=True)
class HostSpec:
    cpu_model: str | None
    numa_nodes: int | None
    memory_per_node_gib: float | None
    cpu_vendor: str | None = None


@dataclass(frozen=True)
class TopologySpec:
    device_numa: tuple[int, ...] | None  # device i -> NUMA node
    devices_per_switch: int | None
    uplink_generation: int | None  # PCIe generation of the switch's uplink
    uplink_lanes: int | None
    ido: str  # PCIe ID-based ordering: 'on' | 'off' | 'unknown'


@dataclass(frozen=True)
class Target:
    """A number a run must reach. `tolerance` is absolute, in `unit`, and always loosens:
    '<=' passes up to value + tolerance, '>=' down to value - tolerance, '==' within it."""

    name: str
    metric: str
    comparator: str
    value: float
    tolerance: float
    unit: str
    source: str
    note: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise FieldError("name", "a snake_case target name", repr(self.name))
        if self.metric not in METRICS:
            raise FieldError("metric", f"a known metric ({', '.join(METRICS)})", repr(self.metric))
        unit = METRICS[self.metric][0]
        if self.comparator not in COMPARATORS:
            raise FieldError("comparator", f"one of {' '.join(COMPARATORS)}", repr(self.comparator))
        for key, what in (("value", "a finite number"),
                          ("tolerance", "a non-negative number (absolute, same unit)")):
            v = getattr(self, key)
            if not is_number(v) or not math.isfinite(v) or (key == "tolerance" and v < 0):
                raise FieldError(key, f"{what} of {unit}", repr(v))
            object.__setattr__(self, key, float(v))
        if self.unit != unit:
            raise FieldError("unit", f"{unit!r} (the unit of metric {self.metric})", repr(self.unit))
        for key in ("source", "note"):
            v = getattr(self, key)
            if not isinstance(v, str) or (key == "source" and not v.strip()):
                raise FieldError(key, "a non-empty string", repr(v))

    def check(self, measured: float) -> bool:
        m = float(measured)
        if math.isnan(m):
            return False
        v, t = self.value, self.tolerance
        return {
            "<=": m <= v + t, "<": m < v + t, ">=": m >= v - t, ">": m > v - t, "==": abs(m - v) <= t,
        }[self.comparator]

    def describe(self) -> str:
        tol = f" (tolerance {self.tolerance:g})" if self.tolerance else ""
        return f"{self.metric} {self.comparator} {self.value:g} {self.unit}{tol}"


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    description: str
    device: DeviceSpec
    host: HostSpec
    topology: TopologySpec | None
    link: LinkModel
    compute: ComputeModel
    targets: tuple[Target, ...]
    host_costs: HostCosts = field(default_factory=HostCosts)
    l3_link: L3LinkModel = field(default_factory=L3LinkModel)
    readings: str | None = None  # file name of the profile's measured readings (hardware_profiles/readings/)
    # key path -> where its value comes from, for every value written with a source
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # key path -> (low, high) a value is plausible in (`range:`, stated beside an assumed value)
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # key path -> the standard error of a measured value (`stderr:`)
    stderrs: dict[str, float] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def target(self, name: str) -> Target:
        for t in self.targets:
            if t.name == name:
                return t
        have = ", ".join(t.name for t in self.targets) or "none"
        raise KeyError(f"profile {self.name!r} ({self.path}) has no target {name!r}; its targets: {have}")

    def require_topology(self) -> TopologySpec:
        if self.topology is None:
            raise ProfileError(str(self.path), "topology", "a topology section",
                               f"none (profile {self.name} has no topology)")
        return self.topology

    def assumptions(self) -> dict[str, str]:
        """Values that are assumed rather than measured or derived, so reports can flag them."""
        return {k: s for k, s in self.sources.items() if s.lower().startswith("assumed")}
