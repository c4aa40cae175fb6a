"""Request-path semantics presets, looked up by name: SGLang's (upstream) decisions, or the reference's.

A preset gives every switch a value; a switch given explicitly overrides it.
A later preset (a versioned SGLang release) is one more `register_preset` call, not a new field.
The switches and each preset's values: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

from hicache_ref.core.allocator import UPSTREAM_ORDERS

SWITCHES = ("hit_count", "backup_scope", "evict_size", "load_back_threshold", "free_list", "host_free_list",
            "io_backend")
PRESETS: dict[str, dict] = {}


def register_preset(name: str, **switches) -> None:
    """Add preset `name`; it must give every switch (SWITCHES)."""
    if set(switches) != set(SWITCHES):
        raise ValueError(f"preset {name!r}: gives {sorted(switches)}, expected every switch of {SWITCHES}")
    PRESETS[name] = dict(switches)


register_preset("reference", hit_count="per_request", backup_scope="node", evict_size="shortfall",
                load_back_threshold=0, free_list="fifo", host_free_list=None, io_backend="direct")
register_preset("upstream", hit_count="per_insert", backup_scope="node", evict_size="whole", load_back_threshold=10,
                free_list=UPSTREAM_ORDERS["device"], host_free_list=UPSTREAM_ORDERS["host"], io_backend="kernel")


def preset_names() -> tuple[str, ...]:
    return tuple(PRESETS)


def preset(name: str) -> dict:
    """The switches' values under preset `name` (KeyError if unknown: the spec names the option)."""
    return dict(PRESETS[name])
