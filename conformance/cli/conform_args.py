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
# pytest options (as parsed: abbreviations and spellings alike) under which no test body runs, or
# pytest only prints and exits: a run that checked nothing must not be read as a verdict
_NO_BODY = {"setuponly": "--setup-only", "setupplan": "--setup-plan", "collectonly": "--collect-only",
            "showfixtures": "--fixtures", "show_fixtures_per_test": "--fixtures-per-test",
            "markers": "--markers", "help": "--help", "version": "--version", "usepdb": "--pdb",
            "trace": "--trace"}


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


def check_pytest_parses(args: list[str]) -> None:
    """The child's pytest arguments, parsed here by pytest's own parser with the same plugins, before
    OUT is made: CliError for an option pytest does not know (its exit 4, after OUT was made), or one
    under which no test body runs (`--setup-only`, `--collect-only`, ...: a run that checks nothing)."""
    import tempfile

    from _pytest.config import UsageError, _prepareconfig

    with tempfile.TemporaryDirectory(prefix="hicache-conform-args-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        try:
            config = _prepareconfig([*args, "-c", str(ini), "--rootdir", tmp, "-p", "no:cacheprovider"])
        except UsageError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if "error:" in ln] or [str(e)]
            raise CliError("--", f"pytest refuses an argument: {clip(lines[0].split('error:', 1)[-1], 160)}") from None
        except Exception as e:  # noqa: BLE001 - a plugin named with -p that cannot import, and the like
            raise CliError("--", f"pytest cannot start with these arguments: {clip(e, 160)}") from None
        try:
            for dest, option in _NO_BODY.items():
                if getattr(config.option, dest, False):
                    raise CliError(option, "no test body would run (pytest would only set up, print, or wait at a "
                                           "debugger), so the run could say nothing about the backend; drop it "
                                           "(after --, or from PYTEST_ADDOPTS)")
        finally:
            config._ensure_unconfigure()


def selected_nothing(keyword: str | None, args: list[str]) -> bool:
    """A selection was given (-k, or -k, -m or --deselect after --): pytest's "no tests collected"
    (exit 5) is then the selection matching nothing; without one it is a run of nothing (NOT RUN)."""
    return keyword is not None or any(a.split("=", 1)[0] in ("-k", "-m", "--deselect") or
                                      (a[:2] in ("-k", "-m") and not a.startswith("--")) for a in args)


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
