"""The `hicache` command line's argparse: usage errors as one line, options only as spelled in full.

Every subcommand's parser is made of `Parser` (argparse builds subparsers with the parent's class),
so each refuses an abbreviated option and an empty value the same way, and reports it as the one
line every other bad input is reported as.
"""

from __future__ import annotations

import argparse
import re

from conformance.common.errors import ECHO_CHARS, clip


class UsageError(ValueError):
    """argparse's complaint about the command line, reported like every other bad input."""


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are the same one line as every other error, and which takes
    options only as spelled in full: a prefix (`--lim` for `--limit`) is refused, so an option
    added later can never change what an old command line means. Subparsers are made of this
    class too (argparse builds them with the parent's class)."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        # an option with a value, or a single argument: never an empty one (what follows `--` is pytest's)
        if (action.nargs != 0 if action.option_strings else action.nargs in (None, "?")) and action.dest != "command":
            action.type = _non_empty(action.type, "give one, or leave the option out" if action.option_strings else "give one")
        return action

    def error(self, message: str):
        # argparse quotes the value it refused; a long one is cut like every other echo
        message = re.sub(rf"'([^']{{{ECHO_CHARS},}})'", lambda m: repr(clip(m.group(1))), message)
        raise UsageError(f"{message.removeprefix('argument ')} (see {self.prog} --help)")


def _non_empty(convert, then: str):
    """An option's type that refuses an empty value (`--out "$UNSET"` would otherwise mean the
    current folder, `--trace ""` the packaged trace), then converts as `convert` (None: the text)."""

    def check(text):
        if isinstance(text, str) and not text:
            raise argparse.ArgumentTypeError(f"an empty value (an unset shell variable?): {then}")
        return text if convert is None else convert(text)

    if convert is not None:  # argparse names a refused value by its type's name
        check.__name__ = getattr(convert, "__name__", repr(convert))
    return check
