"""What an engine does with each spec field: honours it, or refuses it with the reason.

Every engine keeps one table, `{field path: Honoured(...) | Refused(...)}`, over every field of
the spec that is an option (`spec_fields()`: "tiers.l1_tokens", "profile", ...). A replay on the
engine first asks `first_refusal(table, spec)`: the first field whose value the engine cannot run,
as one line naming its option. A field the table does not declare is refused whenever it is
given a value other than its default, so a new option never runs silently on an engine that
ignores it; tests/engines/test_engine_support.py fails until each engine declares it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple


class Field(NamedTuple):
    """One spec field that is an option: its path, its option and its default."""

    path: str
    option: str
    default: object


@dataclasses.dataclass(frozen=True)
class Honoured:
    """The engine runs the field as the reference does. `limit(spec) -> why | None` names the
    values (or combinations) it cannot run; None runs every value."""

    how: str = ""
    limit: Callable | None = None

    def refusal(self, spec, field: Field) -> str | None:
        return None if self.limit is None else self.limit(spec)


@dataclasses.dataclass(frozen=True)
class Refused:
    """The engine has no setting for the field: refused (`why`) unless the value is one the
    engine runs anyway: `accepts(spec, value)`, by default the field's default."""

    why: str
    accepts: Callable | None = None

    def refusal(self, spec, field: Field) -> str | None:
        value = value_of(spec, field.path)
        ok = value == field.default if self.accepts is None else self.accepts(spec, value)
        return None if ok else self.why


def spec_fields() -> tuple[Field, ...]:
    """Every field of the spec that is an option, node by node, in the spec's order."""
    from hicache_ref.spec.root import NODES, CacheSpec

    out = []
    for f in dataclasses.fields(CacheSpec):
        node = NODES.get(f.name)
        subs, prefix = (dataclasses.fields(node), f"{f.name}.") if node else ((f,), "")
        for sub in subs:
            if "option" in sub.metadata:
                out.append(Field(prefix + sub.name, sub.metadata["option"], sub.default))
    return tuple(out)


def value_of(spec, path: str):
    node, _, name = path.rpartition(".")
    return getattr(getattr(spec, node) if node else spec, name)


def undeclared(table: dict) -> list[Field]:
    """The spec's option fields `table` declares neither honoured nor refused."""
    return [f for f in spec_fields() if not isinstance(table.get(f.path), (Honoured, Refused))]


def first_refusal(engine: str, table: dict, spec) -> str | None:
    """The first field (in the table's order, then the undeclared ones) whose value `engine`
    does not run: "<option>: <why>"; None when it runs every one."""
    fields = {f.path: f for f in spec_fields()}
    for path, support in table.items():
        if path in fields and (why := support.refusal(spec, fields[path])) is not None:
            return f"{fields[path].option}: {why}"
    for f in undeclared(table):
        if value_of(spec, f.path) != f.default:
            return f"{f.option}: the {engine} engine does not declare whether it runs this option"
    return None
