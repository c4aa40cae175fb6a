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
import re
import signal
import sys
import threading
import time
import warnings

from conformance.common.errors import (
    ECHO_CHARS,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    clip,
    one_line,
)

# Each module defines HELP, add_arguments(parser) and run(args) -> int (exit code).
PACKAGE = "conformance.cli"
COMMANDS = ("plan", "conform", "bench", "doctor", "replay", "calibrate", "trace", "sweep", "backends", "spmd",
            "ablate", "advise")


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


def say(message: str) -> None:
    print(f"hicache: {one_line(message)}", file=sys.stderr, flush=True)


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


def describe(e: BaseException) -> str:
    """The one line for an exception that reached the boundary: the option or file first."""
    if isinstance(e, UnicodeDecodeError):
        return f"input is not UTF-8 text (byte {e.start}: binary or compressed?)"
    if isinstance(e, OSError) and e.strerror:
        where = e.filename if e.filename is not None else None
        return f"{clip(where)}: {e.strerror}" if where is not None else e.strerror
    if isinstance(e, MemoryError):
        return f"out of memory{': ' + str(e) if str(e) else ''}; give smaller sizes"
    text = str(e) or type(e).__name__
    return text


THREAD_JOIN_SECONDS = 10.0


def join_new_threads(before: set[threading.Thread], timeout: float = THREAD_JOIN_SECONDS) -> None:
    """Wait for the threads this command started (emu stream workers end shortly after their
    backend closes). A daemon thread still inside a torch op when the interpreter finalizes is
    killed there, and C++ aborts the process ("terminate called without an active exception"),
    so a run that was done, or interrupted and cleaned up, would end in SIGABRT."""
    deadline = time.monotonic() + timeout
    for t in threading.enumerate():
        if t not in before and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (the terminal closed), raised in the main thread like Ctrl-C, so every
    cleanup an interrupt runs (children stopped, shared files and the output folder's lock removed)
    runs for it too. `signum`: which; the exit status is 128 + it."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


EXIT_TERMINATED = 128 + signal.SIGTERM
_ENDING = {signal.SIGTERM: "terminated", signal.SIGHUP: "hung up (SIGHUP)"}


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    before = set(threading.enumerate())
    in_main = threading.current_thread() is threading.main_thread()
    # a signal already ignored (SIGHUP under nohup) stays ignored
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in _ENDING
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


def _show_user_warnings() -> None:
    """Inside warnings.catch_warnings: library warnings meant for users (a trace's
    TraceOrderWarning) print as the one line `hicache: warning: ...`; others as Python prints them."""
    from hicache_ref.sim.trace.reader import TraceOrderWarning

    shown = warnings.showwarning

    def show(message, category, *rest):
        if issubclass(category, TraceOrderWarning):
            say(f"warning: {message}")
        else:
            shown(message, category, *rest)

    warnings.simplefilter("always", TraceOrderWarning)  # every read that finds one says so
    warnings.showwarning = show


def _environment_problem() -> str | None:
    """What keeps any command from running here, before it imports torch: a working folder that
    was deleted (torch's oneMKL would abort with its own message), stdout closed (nothing printed
    could be seen, and the command would seem to succeed)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return "the current folder was deleted; cd to a folder that exists"
    if sys.stdout is None:
        return "stdout: is closed; nothing could be printed (send it to /dev/null to discard it)"
    return None


def _interrupt_behind(e: BaseException, depth: int = 16) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (Ctrl-C, or a signal as Terminated) in `e`'s causes or context, if any."""
    while e is not None and depth > 0:
        if isinstance(e, KeyboardInterrupt):
            return e
        e, depth = e.__cause__ or e.__context__, depth - 1
    return None


def _main(argv: list[str] | None) -> int:
    if (problem := _environment_problem()) is not None:
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
            _show_user_warnings()
            try:
                return int(args._run(args) or 0)
            except Exception as e:
                # cleanup that failed while Ctrl-C or a signal unwound the run (a transfer the interrupt
                # cut short, a controller that fail-stopped on it): the run was interrupted
                if (stop := _interrupt_behind(e)) is not None:
                    raise stop from None
                raise
    except Terminated as e:
        say(_ENDING.get(e.signum, "terminated"))
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
