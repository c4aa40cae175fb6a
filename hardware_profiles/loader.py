"""Finding and loading profiles: the YAML files shipped in this package, or any path."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from hardware_profiles.field_checks import ProfileError
from hardware_profiles.profile import Profile
from hardware_profiles.profile_schema import build
from hardware_profiles.strict_yaml import yaml_text

_PACKAGE = "hardware_profiles"


def list_profiles() -> list[str]:
    return sorted(e.name[: -len(".yaml")] for e in resources.files(_PACKAGE).iterdir() if e.name.endswith(".yaml"))


def load_profile(name_or_path: str | Path | Profile) -> Profile:
    """A bare name loads the packaged hardware_profiles/<name>.yaml; anything path-like loads that file."""
    if isinstance(name_or_path, Profile):
        return name_or_path
    if isinstance(name_or_path, Path) or (
        isinstance(name_or_path, str) and ("/" in name_or_path or name_or_path.endswith((".yaml", ".yml")))
    ):
        path = Path(name_or_path)
        if not path.is_file():
            raise ProfileError(str(path), "(file)", "an existing YAML file", repr(str(name_or_path)))
        return build(yaml_text(path), path)
    if not isinstance(name_or_path, str):
        raise ProfileError("load_profile", "name_or_path", "a profile name or a path", repr(name_or_path))
    known = list_profiles()
    if name_or_path not in known:
        raise ProfileError(f"{_PACKAGE}/{name_or_path}.yaml", "(profile name)",
                           f"one of {', '.join(known)} or a path to a YAML file", repr(name_or_path))
    entry = resources.files(_PACKAGE) / f"{name_or_path}.yaml"
    return build(entry.read_text(encoding="utf-8"), Path(str(entry)))
