"""What every spec field declares (its command-line option, help, parser, choices) and the one error.

A spec node is a frozen dataclass whose fields are made by `param`: the field's default plus
the metadata conformance.common.spec_options turns into an argparse option, so a field added here
appears as an option in every command it applies to. Checks raise `SpecError`, a ValueError
naming the option (what the user typed) and the field (where it lives in the tree).
"""

from __future__ import annotations

import dataclasses
import math

from hal.common.units import parse_size

ALL_COMMANDS = frozenset({"replay", "sweep", "ablate"})


class SpecError(ValueError):
    """A spec value or a combination of values refused: `option` (e.g. --l3), `field` (storage.l3)."""

    def __init__(self, option: str, field: str, what: str):
        super().__init__(f"{option}: {what}")
        self.option, self.field, self.what = option, field, what


def param(default, option: str, help: str, parse=None, choices=None, metavar: str | None = None,
          commands=ALL_COMMANDS, flag: bool = False, shown_default=None, per_command=None):
    """A spec field with its option: `parse(text) -> value` (ValueError on bad text), `choices`,
    `commands` it applies to, `flag` (a store_true switch), `shown_default` (help text for a None default);
    `per_command`: {command: {"shown_default": text, "required": True}} where a command differs (said in its help)."""
    meta = dict(option=option, help=help, parse=parse, choices=tuple(choices) if choices else None,
                metavar=metavar, commands=frozenset(commands), flag=flag, shown_default=shown_default,
                per_command=per_command or {})
    return dataclasses.field(default=default, metadata=meta)


def option_of(node, name: str) -> str:
    """The command-line option of field `name` of `node` (a spec node instance or class)."""
    for f in dataclasses.fields(node):
        if f.name == name:
            return f.metadata.get("option", name)
    raise KeyError(name)


def fail(node, name: str, what: str):
    """SpecError for field `name` of `node`, naming its option."""
    return SpecError(option_of(node, name), f"{type(node).PATH}.{name}", what)


# -- checks, each raising SpecError naming the field's option ----------------------------------------
def one_of(node, name: str, choices) -> None:
    v = getattr(node, name)
    if v not in choices:
        raise fail(node, name, f"{v!r} is not one of {', '.join(map(str, choices))}")


def flag(node, name: str) -> None:
    if not isinstance(getattr(node, name), bool):
        raise fail(node, name, f"expected True or False, got {getattr(node, name)!r}")


def whole(node, name: str, minimum: int = 0, maximum: int | None = None, none_ok: bool = False) -> None:
    v = getattr(node, name)
    if v is None and none_ok:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum or (maximum is not None and v > maximum):
        span = f"at least {minimum}" + (f" and at most {maximum:,}" if maximum is not None else "")
        raise fail(node, name, f"expected a whole number {span}, got {v!r}")


def real(node, name: str, positive: bool = False, none_ok: bool = False) -> None:
    v = getattr(node, name)
    if v is None and none_ok:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise fail(node, name, f"expected a {'positive' if positive else 'non-negative'} number, got {v!r}")


# -- parsers for the options (text -> value; ValueError says what is wrong) ---------------------------
def _echo(text: str) -> str:
    """`text` as an error echoes it: a long one cut, with its length."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text):,} characters)"


def too_many_digits(text: str) -> int | None:
    """The digits of `text` when it is a whole number past Python's int-from-text limit, else None."""
    digits = text.replace("_", "").strip().lstrip("+-")
    return len(digits) if digits.isdigit() else None


def past_floats(text: str, value: float) -> bool:
    """Whether float(`text`) overflowed to infinity (`text` is a finite number written too large)."""
    return math.isinf(value) and text.strip().lower().lstrip("+-") not in ("inf", "infinity")


def parse_int(minimum: int = 1, maximum: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            if (digits := too_many_digits(text)) is not None:
                raise ValueError(f"at most {maximum or (1 << 63) - 1:,}, got a {digits:,}-digit number") from None
            raise ValueError(f"expected a whole number, got {_echo(text)}") from None
        if value < minimum:
            raise ValueError(f"must be positive, got {_echo(text)}" if minimum == 1
                             else f"must be at least {minimum}, got {_echo(text)}")
        if maximum is not None and value > maximum:
            raise ValueError(f"at most {maximum:,}, got {_echo(text)}")
        return value
    return parse


def parse_tokens(text: str) -> int:
    """A token count with a size suffix (2M, 64K; hal.common.units)."""
    return parse_size(text, name="", minimum=0)


def parse_real(maximum: float | None = None):
    def parse(text: str) -> float:
        try:
            value = float(text.replace("_", ""))
        except ValueError:
            raise ValueError(f"expected a number, got {_echo(text)}") from None
        if past_floats(text, value):
            raise ValueError(f"past the largest number a float holds (~1.8e308), got {_echo(text)}")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"must be a positive number, got {_echo(text)}")
        if maximum is not None and value > maximum:
            raise ValueError(f"at most {maximum:,g}, got {_echo(text)}")
        return value
    return parse
