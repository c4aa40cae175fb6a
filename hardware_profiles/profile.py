"""What a hardware profile holds: the machine (device, host, topology) and the Profile that joins it
to its cost models (hardware_profiles.cost_models) and targets (hardware_profiles.metric_targets).

A profile says what a machine is, how its host link behaves, how fast it prefills and what a run
must reach. Values written `unknown` load as None, so consumers report "not modeled" instead of
computing with an invented number. The schema: hardware_profiles/README.md; the reader:
hardware_profiles.profile_schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hardware_profiles.cost_models import ComputeModel, HostCosts, L3LinkModel, LinkModel
from hardware_profiles.field_checks import DEVICE_OPTIONAL_BOUNDS, ProfileError, check_bounded
from hardware_profiles.metric_targets import Target

SCHEMA_VERSION = 1
UNKNOWN = "unknown"
IDO_STATES = ("on", "off", "unknown")


@dataclass(frozen=True)
class DeviceSpec:
    model: str | None  # None: unknown, like every other value written `unknown`
    hbm_gib: float | None
    devices_per_node: int | None
    peak_bf16_tflops: float | None = None  # dense (no sparsity), per device
    hbm_gbps: float | None = None  # HBM bandwidth, decimal GB/s
    host_link_gbps: float | None = None  # the device's host interface, one direction: the H2D/D2H ceiling

    def __post_init__(self):
        check_bounded(self, DEVICE_OPTIONAL_BOUNDS)


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
