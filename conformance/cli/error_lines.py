"""What the `hicache` command prints when something goes wrong: one line on stderr, the option or
file first (`hicache: <option or file>: <what is wrong>`).

`describe` turns an exception that reached the command's boundary into that line; library warnings
meant for users print the same way; `environment_problem` names what keeps any command from running
here before torch is imported.
"""

from __future__ import annotations

import os
import sys
import warnings

from conformance.common.errors import clip, one_line


def say(message: str) -> None:
    print(f"hicache: {one_line(message)}", file=sys.stderr, flush=True)


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


def show_user_warnings() -> None:
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


def environment_problem() -> str | None:
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
