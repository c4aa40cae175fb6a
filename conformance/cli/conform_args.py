"""What `hicache conform` checks of its own arguments before OUT is touched, and the junit it keeps.

A pytest -k expression that does not parse, a pytest argument after -- that would move the report
conform reads, a worker count past the cores and a backend that moves no bytes are answered here,
as bad input (one line, exit 2) or a warning, not as a failed run of pytest.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.common.errors import CliError, clip, clip_path
from conformance.common.safe_write import write_bytes

# pytest options after -- that would move or drop the report and ini conform reads and owns
_OWNED = ("--junitxml", "--junit-xml", "--junitprefix", "--junit-prefix", "-c", "--config-file", "--rootdir",
          "--basetemp")
_OWNED_PLUGINS = ("no:junitxml", "no:conformance.plugin", "no:conformance.report.selection")


def check_keyword(keyword: str | None) -> None:
    """A -k expression pytest can parse; CliError naming -k otherwise (pytest would stop with an
    INTERNALERROR, which reads as a failed run)."""
    if keyword is None:
        return
    from _pytest.mark.expression import Expression

    try:
        Expression.compile(keyword)
    except Exception as e:  # SyntaxError in pytest 9, ParseError before: either way, not an expression
        raise CliError("-k", f"{clip(repr(keyword))} is not a pytest -k expression ({clip(e, 160)})") from None


def check_child_args(args: list[str]) -> None:
    """The pytest arguments after --: CliError for one that moves the report or config conform owns."""
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0]
        if name in _OWNED or (arg.startswith("-c") and not arg.startswith("--")):
            raise CliError(name if name in _OWNED else "-c", "conform sets it itself (its report goes to "
                           "OUT/junit.xml; pass --out DIR to choose where); drop it after --")
        plugin = args[i + 1] if arg == "-p" and i + 1 < len(args) else arg[2:] if arg.startswith("-p") else None
        if plugin in _OWNED_PLUGINS:
            raise CliError("-p", f"conform needs the plugin {plugin[3:]} (it writes or counts the report); "
                                 "drop it after --")


def bound_workers(value: str) -> str:
    """--workers as given, a number past this host's cores cut to the cores (said on stderr): more
    workers than cores only add start-up time and memory."""
    cores = os.cpu_count() or 1
    text = value.strip()
    if text.isdigit() and int(text) > cores:
        print(f"hicache: warning: --workers {clip(text, 20)}: more than the {cores} cores here; using {cores}",
              file=sys.stderr, flush=True)
        return str(cores)
    return value


def count_backend(name: str) -> None:
    """CliError for a backend that moves no bytes (count): every suite checks bytes that moved."""
    from hal.backend import backend_class

    try:
        cls = backend_class(name)
    except ImportError:
        return
    if getattr(cls, "name", None) == "count":
        raise CliError("--backend", "count moves no bytes (it prices plans on the modeled clock), and every "
                                    "conformance suite checks the bytes that moved; pass emu or a device backend")


def take_junit(made: Path, out: Path) -> Path | None:
    """The junit pytest wrote in the work folder, checked to be whole XML and written to `out`
    (safe_write); None when pytest wrote none. CliError naming it when it is cut short (a full disk)."""
    try:
        data = made.read_bytes()
    except FileNotFoundError:
        return None
    try:
        ET.fromstring(data)
    except ET.ParseError as e:
        raise CliError(clip_path(out), f"pytest's report is cut short or not XML ({clip(e, 80)}; a full "
                                        "disk?): the run has no verdict") from None
    write_bytes(out, data)
    return out
