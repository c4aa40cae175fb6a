"""A tiny registry of classes by name: built-ins, registered classes, and an entry-point group.

One copy of the lookup rules that hal.registry (device backends), hal.transfer.layout_registry
(host layouts) and hicache_ref.storage.registry (L3 stores) share: a class registered at run time
wins, then an installed entry point, then a built-in. A built-in is a module of the registry's
folder that names its class in a module-level constant (`BACKEND = EmuBackend`), found by
`modules_defining` from the source text: adding the file adds the name. Modules are imported
only when their class is asked for, so listing the names never imports a vendor runtime or a wheel.
"""

from __future__ import annotations

import importlib
import re
import threading
from importlib import metadata
from pathlib import Path


def modules_defining(package: str, folder: Path, constant: str) -> dict[str, str]:
    """{module name: "package.module:constant"} for every module directly in `folder` (the folder
    of `package`), or package's __init__.py there, that assigns `constant` at its top level; read
    as text, nothing imported."""
    assigns = re.compile(rf"^{constant}\s*[:=]", re.M)
    files = {path.stem: path for path in folder.glob("*.py")}
    files.update({path.parent.name: path for path in folder.glob("*/__init__.py")})
    return {name: f"{package}.{name}:{constant}" for name, path in sorted(files.items())
            if assigns.search(path.read_text(encoding="utf-8"))}


class Registry:
    """Backend classes by name for one kind of plugin (`kind` starts its errors: "backend", "storage")."""

    def __init__(self, kind: str, group: str, builtin: dict[str, str]):
        self.kind, self.group, self._builtin = kind, group, dict(builtin)
        self._lock = threading.Lock()
        self._classes: dict[str, type] = {}

    def register(self, name: str, cls: type) -> None:
        """Make `cls` the class called `name` (replacing any earlier one)."""
        with self._lock:
            self._classes[name] = cls

    def names(self) -> list[str]:
        """Every name known: built-in, registered, or an installed entry point (sorted)."""
        with self._lock:
            names = set(self._builtin) | set(self._classes)
        names |= {ep.name for ep in metadata.entry_points(group=self.group)}
        return sorted(names)

    def get(self, name: str) -> type:
        """The class called `name`; ValueError naming the kind and the known names when none is."""
        with self._lock:
            if name in self._classes:
                return self._classes[name]
        for ep in metadata.entry_points(group=self.group):
            if ep.name == name:
                cls = ep.load()
                self.register(name, cls)
                return cls
        if name in self._builtin:
            module, _, attr = self._builtin[name].partition(":")
            cls = getattr(importlib.import_module(module), attr)
            self.register(name, cls)
            return cls
        raise ValueError(f"{self.kind}: unknown backend {name!r}; known: {', '.join(self.names())}")
