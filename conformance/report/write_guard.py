"""pytest plugin `hicache conform` loads into its child: a report it cannot write is one line.

The child writes its junit (and the selection counts) into conform's work folder, on the
user's disk. A full or read-only disk there ended the child with pytest's 50-line traceback;
this turns that OSError into one line naming the file, and an exit status of its own, which
conform passes on as exit 2 with no report and no verdict (nothing it could judge was kept).
"""

from __future__ import annotations

import sys

import pytest

EXIT_UNWRITTEN = 74  # sysexits' EX_IOERR: the child could not write a report
_FAILED: list[str] = []  # writes that failed before the session ended (the selection counts)


def unwritten(error: Exception, path: str | None = None) -> None:
    """Remember a report write that failed (an OSError, or safe_write's CliError naming the file);
    the session's end says it and sets the exit status."""
    from conformance.common.safe_write import write_failed

    if isinstance(error, OSError):
        error = write_failed(error.filename or path or "a report", error)  # write() names no file
    _FAILED.append(str(error))


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session):
    try:
        result = yield  # junitxml writes its file here
    except OSError as e:
        unwritten(e, getattr(session.config.option, "xmlpath", None))
        result = None
    if _FAILED:
        print(f"hicache: {_FAILED[0]}; the run has no verdict", file=sys.stderr, flush=True)
        session.exitstatus = EXIT_UNWRITTEN
    return result
