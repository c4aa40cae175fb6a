"""Hardware profiles: one YAML file per machine (next to this file) and the code that reads them.

`profile` (Profile and its parts: LinkModel, ComputeModel, Target...; schema constants; METRICS),
`profile_schema` (the strict YAML reader), `loader` (list_profiles, load_profile), `values` (what counts as
a number, hal's rule too). Profiles are data about machines that hal's backends price with, so they
sit below hal and import nothing of it; the public API is re-exported here.
"""

from hardware_profiles.loader import list_profiles, load_profile
from hardware_profiles.profile import (
    METRICS,
    SCHEMA_VERSION,
    UNKNOWN,
    ComputeModel,
    DeviceSpec,
    HostSpec,
    LinkModel,
    Profile,
    ProfileError,
    Target,
    TopologySpec,
)

__all__ = [
    "METRICS", "SCHEMA_VERSION", "UNKNOWN", "ComputeModel", "DeviceSpec", "HostSpec", "LinkModel", "Profile",
    "ProfileError", "Target", "TopologySpec", "list_profiles", "load_profile",
]
