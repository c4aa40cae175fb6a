"""How the `hicache` command reports what is wrong: one line, `hicache: <option or file>: <what>`.

Commands and tools raise `CliError` (a ValueError, so library callers and tests treat it like
any bad argument) naming the option; conformance.cli.main turns it, and the library's
ValueErrors and OSErrors, into that one line. `clip` bounds what is echoed of the user's input.
"""

from __future__ import annotations

ECHO_CHARS = 80  # at most this much of a user's input (a path, a value, a file's text) is echoed
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_NOT_RUN, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_PARTIAL = 4  # conform: nothing failed, but the deciding suites ran only in part


class CliError(ValueError):
    """Bad input or an environment the command cannot run in, attributed to an option or a file."""

    def __init__(self, where: str, what: str):
        super().__init__(f"{where}: {what}")
        self.where, self.what = where, what


def engine_error(engine: str, error: ValueError) -> CliError:
    """The one line for an engine's refusal: the option it names (`--kv-dim: ...`), else `--engine`."""
    option, _, why = str(error).partition(": ")
    return CliError(option, why) if option.startswith("--") else CliError("--engine", f"{engine}: {error}")


def clip(text: object, limit: int = ECHO_CHARS) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis when longer."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def clip_path(path: object, limit: int = 2 * ECHO_CHARS) -> str:
    """A path on one line, cut at the front when longer: the file name is the part that tells."""
    flat = " ".join(str(path).split())
    return flat if len(flat) <= limit else "..." + flat[-(limit - 3):]


def one_line(message: str, limit: int = 400) -> str:
    """A whole message on one line: newlines folded, cut to `limit` characters. The parts echoing
    user input are clipped where they are made; this bounds what a library message can carry."""
    return clip(message, limit)
