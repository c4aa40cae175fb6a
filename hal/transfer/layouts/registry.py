"""Host layouts by name, through the project's one Registry (hal.named_registry).

Built-ins are this package's other modules, one per layout, named as the layout and exposing
its class as `LAYOUT`: adding a file adds the layout. A layout registered at run time (`register_layout`) or
installed under the `hicache.host_layouts` entry point group is found the same way. Layouts
are stateless, so one instance per name is kept and handed out.
"""

from __future__ import annotations

import pkgutil
from pathlib import Path

from hal.named_registry import Registry
from hal.transfer.layouts.base import HostLayout

_NOT_LAYOUTS = {"base", "geometry", "registry"}  # the package's modules that hold no layout
_BUILTIN = {m.name: f"{__package__}.{m.name}:LAYOUT" for m in pkgutil.iter_modules([str(Path(__file__).parent)])
            if m.name not in _NOT_LAYOUTS}
REGISTRY = Registry("layout", "hicache.host_layouts", _BUILTIN)
_instances: dict[str, HostLayout] = {}


def register_layout(cls: type) -> None:
    """Make the HostLayout subclass `cls` the layout called `cls.name` (replacing any earlier one)."""
    if not (isinstance(cls, type) and issubclass(cls, HostLayout)) or not cls.name:
        raise ValueError(f"layout: {cls!r} is not a named HostLayout subclass")
    REGISTRY.register(cls.name, cls)
    _instances.pop(cls.name, None)


def layout_names(attention: str | None = None) -> tuple[str, ...]:
    """Every known layout name (sorted), or those supporting `attention` ("mha", "mla")."""
    names = REGISTRY.names()
    if attention is None:
        return tuple(names)
    return tuple(n for n in names if get_layout(n).supports(attention))


def get_layout(layout: str | HostLayout) -> HostLayout:
    """The layout called `layout` (a HostLayout passes through); ValueError naming layout."""
    if isinstance(layout, HostLayout):
        return layout
    found = _instances.get(layout) if isinstance(layout, str) else None
    if found is not None:
        return found
    if not isinstance(layout, str) or layout not in REGISTRY.names():
        raise ValueError(f"layout: unknown host layout {layout!r}; known: {', '.join(REGISTRY.names())}")
    found = _instances[layout] = REGISTRY.get(layout)()
    return found
