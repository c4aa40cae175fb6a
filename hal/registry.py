"""Which backends exist and how to get one: built-ins, registered classes, entry points.

Out-of-tree backends register under the entry-point group ``hicache.backends`` (name = class
path), like vLLM's platform plugins, or call `register(name, cls)`. Classes are imported only
when asked for, so naming the backends never imports torch_xmlir or CUDA.
"""

from __future__ import annotations

import importlib
import threading
from importlib import metadata
from typing import Any

ENTRY_POINT_GROUP = "hicache.backends"

_BUILTIN = {
    "emu": "hal.backends.emu:EmuBackend",
    "count": "hal.backends.count:CountBackend",
    "cuda": "hal.backends.cuda:CudaBackend",
    "xpu": "hal.backends.xpu:XpuBackend",
}
_lock = threading.Lock()
_registry: dict[str, type] = {}


def register(name: str, cls: type) -> None:
    """Make `cls` (a hal.backend.Backend subclass) the backend called `name`."""
    with _lock:
        _registry[name] = cls


def _load(spec: str) -> type:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def available_backends() -> list[str]:
    names = set(_BUILTIN) | set(_registry)
    names |= {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(names)


def backend_class(name: str) -> type:
    """The Backend subclass called `name`; ValueError naming the known ones when there is none."""
    with _lock:
        if name in _registry:
            return _registry[name]
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            cls = ep.load()
            register(name, cls)
            return cls
    if name in _BUILTIN:
        cls = _load(_BUILTIN[name])
        register(name, cls)
        return cls
    raise ValueError(f"backend: unknown backend {name!r}; known: {', '.join(available_backends())}")


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
