"""Storage backends by name, and `open_storage(spec)`.

A spec is `NAME:ARGS`, e.g. `file:/var/cache/kv,max_bytes=64GiB` (without max_bytes: half of the
filesystem's room at open, hicache_ref.storage.file), `memory:max_bytes=1G` or
`mooncake:http://127.0.0.1:8080/metadata,127.0.0.1:50051`. The backend class parses ARGS
itself (`from_spec`). Out-of-tree backends register under the entry-point group
``hicache.storage`` (name = class path) or call `register(name, cls)`; classes are imported only
when asked for, so listing the names never imports the Mooncake wheel.
"""

from __future__ import annotations

from pathlib import Path

from hal.common.named_registry import Registry, modules_defining
from hal.common.units import parse_size
from hicache_ref.storage.integrity import check_digest

ENTRY_POINT_GROUP = "hicache.storage"

# A built-in store is a module of this folder that names its class `STORE`, called as the file.
_STORES = Registry("storage", ENTRY_POINT_GROUP,
                   modules_defining("hicache_ref.storage", Path(__file__).parent, "STORE"))


def register(name: str, cls: type) -> None:
    """Make `cls` (a StorageBackend subclass with a `from_spec(args, spec)` classmethod) backend `name`."""
    _STORES.register(name, cls)


def available_storage() -> list[str]:
    return _STORES.names()


def storage_class(name: str) -> type:
    """The backend class called `name`; ValueError naming the known ones when there is none."""
    return _STORES.get(name)


def split_spec(spec) -> tuple[str, str]:
    """('file', '/dir,max_bytes=1G') from 'file:/dir,max_bytes=1G'; ValueError naming the spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"storage spec: expected NAME:ARGS such as file:/tmp/kv, got {spec!r}")
    name, sep, args = spec.strip().partition(":")
    if not sep or not name:
        raise ValueError(f"storage spec {spec!r}: expected NAME:ARGS (known names: "
                         f"{', '.join(available_storage())})")
    return name, args


def parse_options(items: list[str], spec: str, allowed: dict[str, str]) -> dict:
    """`key=value` items into a dict; `allowed` maps each key to its kind ('size', 'digest' or 'str')."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise ValueError(f"storage spec {spec!r}: {item!r}: expected one of "
                             f"{', '.join(k + '=...' for k in allowed)}")
        if key in out:
            raise ValueError(f"storage spec {spec!r}: {key}: given twice")
        what = f"storage spec {spec!r}: {key}"
        kind = allowed[key]
        out[key] = parse_size(value, name=what, minimum=1) if kind == "size" else \
            check_digest(value.strip(), what) if kind == "digest" else value
    return out


def open_storage(spec: str):
    """A connected storage client for `spec` (see the module docstring).

    ValueError naming the spec part for a bad spec; RuntimeError with one line naming the spec
    when the backend cannot run here (e.g. the Mooncake wheel or its libraries are missing)."""
    name, args = split_spec(spec)
    return storage_class(name).from_spec(args, spec)
