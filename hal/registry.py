"""Which backends exist and how to get one: built-ins, registered classes, entry points.

A built-in is a module of hal/backends/ that names its class `BACKEND`, called as the file.
Out-of-tree backends register under the entry-point group ``hicache.backends`` (name = class
path), like vLLM's platform plugins, or call `register(name, cls)`. Classes are imported only
when asked for, so naming the backends never imports torch_xmlir or CUDA.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hal.common.named_registry import Registry, modules_defining

ENTRY_POINT_GROUP = "hicache.backends"

_BACKENDS = Registry("backend", ENTRY_POINT_GROUP,
                     modules_defining("hal.backends", Path(__file__).parent / "backends", "BACKEND"))


def register(name: str, cls: type) -> None:
    """Make `cls` (a hal.backend.Backend subclass) the backend called `name`."""
    _BACKENDS.register(name, cls)


def available_backends() -> list[str]:
    return _BACKENDS.names()


def backend_class(name: str) -> type:
    """The Backend subclass called `name`; ValueError naming the known ones when there is none."""
    return _BACKENDS.get(name)


def get_backend(name: str = "emu", profile: Any = None) -> Any:
    """A backend instance bound to a hardware profile (name, path or loaded Profile)."""
    cls = backend_class(name)
    ok, why = cls.probe()
    if not ok:
        raise RuntimeError(f"backend {name!r} is not available here: {why}")
    if profile is not None and not hasattr(profile, "link"):
        from hardware_profiles.loader import load_profile

        profile = load_profile(profile)
    return cls(profile)
