"""Hardware profiles: one YAML file per machine (next to this file) and the code that reads them.

`profile` (Profile and the machine it describes: DeviceSpec, HostSpec, TopologySpec; the schema's
version), `cost_models` (LinkModel, ComputeModel, HostCosts, L3LinkModel: what a profile prices with),
`metric_targets` (Target and the METRICS a target may name), `field_checks` (each value's Bound, and
ProfileError / FieldError), `strict_yaml` (reading the YAML document), `sourced_leaves` (one leaf: value,
source, range or stderr), `profile_schema` (each section read into its dataclass), `loader` (list_profiles,
load_profile), `values` (what counts as a number, hal's rule too), `bounded` (bounded reading of user
files: traces, YAML), `measured_readings` (a profile's readings file), `transfer_price` (the one price of
a transfer, L2 link or L3 store). Profiles are data about machines
that hal's backends price with, so they sit below hal and import nothing of it; the public API is
re-exported here.
"""

from hardware_profiles.cost_models import ComputeModel, LinkModel
from hardware_profiles.field_checks import ProfileError
from hardware_profiles.loader import list_profiles, load_profile
from hardware_profiles.metric_targets import METRICS, Target
from hardware_profiles.profile import SCHEMA_VERSION, UNKNOWN, DeviceSpec, HostSpec, Profile, TopologySpec

__all__ = [
    "METRICS", "SCHEMA_VERSION", "UNKNOWN", "ComputeModel", "DeviceSpec", "HostSpec", "LinkModel", "Profile",
    "ProfileError", "Target", "TopologySpec", "list_profiles", "load_profile",
]
