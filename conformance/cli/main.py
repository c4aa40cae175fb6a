"""The `hicache` command: one thin subcommand per module in conformance/cli/, one error boundary.

A run imports only the module of the subcommand it names (`build_parser(argv)`): `--version` and
`--help` import none of them, so none of torch, and answer in a tenth of a second, not two.

Every run ends in one of these exit codes (README "Exit codes"): 0 done / passed, 1 a check
failed, 2 bad input or an environment the command cannot run in, 3 `conform` ran nothing that
decides (NOT RUN), 4 `conform` ran the deciding suites only in part (PARTIAL), 5 `conform -k`
matched no test, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP). Whatever goes wrong is reported on stderr as the single line `hicache: <option or file>: <what is wrong>`; set
HICACHE_TRACEBACK=1 to see the traceback of an unexpected error instead.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import signal
import sys
import threading
import warnings

from conformance.cli.error_lines import describe, environment_problem, say, show_user_warnings
from conformance.cli.run_ending import (
    ENDING,
    Terminated,
    interrupt_behind,
    join_new_threads,
    raise_terminated,
)
from conformance.cli.strict_parser import Parser
from conformance.common.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED

# Each module defines HELP, add_arguments(parser) and run(args) -> int (exit code).
PACKAGE = "conformance.cli"
COMMANDS = ("plan", "conform", "bench", "doctor", "replay", "calibrate", "trace", "sweep", "backends", "spmd",
            "ablate", "advise")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("hicache-harness")
    except PackageNotFoundError:
        return "unknown (not installed)"


def add_module_parsers(sub, package: str, names, run_key: str) -> None:
    """One subparser per module `package.<name>`, dispatching to its run(args) via `run_key`."""
    for name in names:
        mod = importlib.import_module(f"{package}.{name}")
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(**{run_key: mod.run})


def command_help(name: str) -> str:
    """Subcommand `name`'s HELP without importing its module when HELP is a literal in its source:
    the modules import torch and the rest (seconds), which `--version` and `--help` need none of.
    A HELP computed at import (bench's) comes from the module itself."""
    spec = importlib.util.find_spec(f"{PACKAGE}.{name}")
    try:
        with open(spec.origin, encoding="utf-8") as f:
            tree = ast.parse(f.read(), spec.origin)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "HELP" for t in node.targets):
                return ast.literal_eval(node.value)
    except (OSError, ValueError, SyntaxError, TypeError):
        pass
    return importlib.import_module(f"{PACKAGE}.{name}").HELP


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The `hicache` parser: every subcommand with its options; given `argv`, only what parsing
    `argv` needs: the subcommand it names with its options, or, when it names none (`--version`,
    `--help`, a mistyped name), every subcommand's name and help and no module imported."""
    parser = Parser(prog="hicache", description="HiCache test harness")
    parser.add_argument("--version", action="version", version=f"hicache {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    if argv is None:
        add_module_parsers(sub, PACKAGE, COMMANDS, "_run")
        return parser
    # The top level takes no option with a value, so the first word not an option names the
    # subcommand; before it there may be only --help/--version (they exit before it is parsed).
    # Anything else there gets the full parser, so its complaint reads as it always did.
    at = next((i for i, w in enumerate(argv) if not w.startswith("-")), len(argv))
    named = argv[at] if at < len(argv) else None
    if at == 0 and named in COMMANDS:
        add_module_parsers(sub, PACKAGE, [named], "_run")
    elif all(_exits_first(w) for w in argv[:at]):  # --help, --version, no or a mistyped subcommand
        for name in COMMANDS:
            sub.add_parser(name, help=command_help(name))
    else:
        add_module_parsers(sub, PACKAGE, COMMANDS, "_run")
    return parser


def _exits_first(word: str) -> bool:
    """`word` is -h, --help or --version: the top-level options that exit before any subcommand."""
    return word in ("-h", "--help", "--version")


def main(argv: list[str] | None = None) -> int:
    before = set(threading.enumerate())
    in_main = threading.current_thread() is threading.main_thread()
    # a signal already ignored (SIGHUP under nohup) stays ignored
    previous = {sig: signal.signal(sig, raise_terminated) for sig in ENDING
                if signal.getsignal(sig) is not signal.SIG_IGN} if in_main else {}
    try:
        return _main(argv)
    finally:
        try:
            join_new_threads(before)
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            pass
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _main(argv: list[str] | None) -> int:
    if (problem := environment_problem()) is not None:
        say(problem)
        return EXIT_BAD_INPUT
    try:
        args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
        if os.environ.get("HICACHE_MEMORY_BUDGET"):  # refused when it is not a size, whatever the command
            from hal.memory.budget import check_env

            check_env()
        # every command's ensemble draws the derived parameters (imported here, not at the top:
        # --help and --version load no torch)
        importlib.import_module("hicache_ref.sim.fit.derivation_cache")
        with warnings.catch_warnings():  # restores showwarning and the filters when the command ends
            show_user_warnings()
            try:
                return int(args._run(args) or 0)
            except Exception as e:
                # cleanup that failed while Ctrl-C or a signal unwound the run (a transfer the interrupt
                # cut short, a controller that fail-stopped on it): the run was interrupted
                if (stop := interrupt_behind(e)) is not None:
                    raise stop from None
                raise
    except Terminated as e:
        say(ENDING.get(e.signum, "terminated"))
        return 128 + e.signum
    except KeyboardInterrupt:
        say("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `hicache ... | head`: the reader left; nothing to tell it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except (ValueError, OSError, MemoryError) as e:
        say(describe(e))
        return EXIT_BAD_INPUT
    except OverflowError as e:  # a value past what a float or an index holds, from any option
        say(f"a value is out of range ({e}); give smaller or larger numbers")
        return EXIT_BAD_INPUT
    except Exception as e:  # a bug: still one line, unless asked for the traceback
        if os.environ.get("HICACHE_TRACEBACK"):
            raise
        say(f"internal error: {type(e).__name__}: {e} (HICACHE_TRACEBACK=1 shows where)")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
