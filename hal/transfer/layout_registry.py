"""Host layouts by name, through the project's one Registry (hal.common.named_registry).

Built-ins are the modules of hal.transfer.layouts, one per layout, named as the layout and
exposing its class as `LAYOUT`: adding a file adds the layout. They are loaded by name when
first asked for, so hal.transfer never imports the layouts package (which imports it). A layout
registered at run time (`register_layout`) or installed under the `hicache.host_layouts` entry
point group is found the same way. Layouts are stateless, so one instance per name is kept and handed out.
"""

from __future__ import annotations

from pathlib import Path

from hal.common.named_registry import Registry, modules_defining

REGISTRY = Registry("layout", "hicache.host_layouts",
                    modules_defining("hal.transfer.layouts", Path(__file__).parent / "layouts", "LAYOUT"))
_instances: dict = {}  # name -> the one HostLayout instance


def register_layout(cls: type) -> None:
    """Make `cls` (a hal.transfer.layouts.base.HostLayout subclass) the layout called `cls.name`
    (replacing any earlier one)."""
    if not isinstance(cls, type) or not isinstance(getattr(cls, "name", None), str) or not cls.name:
        raise ValueError(f"layout: {cls!r} is not a named HostLayout subclass")
    REGISTRY.register(cls.name, cls)
    _instances.pop(cls.name, None)


def layout_names(attention: str | None = None) -> tuple[str, ...]:
    """Every known layout name (sorted), or those supporting `attention` ("mha", "mla")."""
    names = REGISTRY.names()
    if attention is None:
        return tuple(names)
    return tuple(n for n in names if get_layout(n).supports(attention))


def get_layout(layout):
    """The HostLayout called `layout` (a layout object passes through); ValueError naming layout."""
    if not isinstance(layout, str) and hasattr(layout, "piece_offsets"):
        return layout
    found = _instances.get(layout) if isinstance(layout, str) else None
    if found is not None:
        return found
    if not isinstance(layout, str) or layout not in REGISTRY.names():
        raise ValueError(f"layout: unknown host layout {layout!r}; known: {', '.join(REGISTRY.names())}")
    found = _instances[layout] = REGISTRY.get(layout)()
    return found


def check_layout(layout, geom):
    """The layout `layout` names, if a pool of `geom`'s attention kind may use it; else
    ValueError naming layout and the allowed ones."""
    try:
        found = get_layout(layout)
    except ValueError:
        found = None
    if found is None or not found.supports(geom.attention):
        allowed = layout_names(geom.attention)
        name = getattr(layout, "name", layout)
        raise ValueError(f"layout: {name!r} is not a {geom.attention.upper()} host layout ({', '.join(allowed)})")
    return found
