"""`run`: subprocess.run for tests, whose failure shows the command's stdout and stderr.

`check=True` raises CalledProcessError, and pytest prints it without the output the command
captured: the reason a child failed is thrown away. Here a non-zero exit is an AssertionError
naming the command, its status and the tail of both streams.
"""

from __future__ import annotations

import subprocess

TAIL_CHARS = 4000


def _tail(text) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = text or ""
    return text if len(text) <= TAIL_CHARS else "..." + text[-TAIL_CHARS:]


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True, **kwargs); AssertionError with the
    output when it exits non-zero."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    proc = subprocess.run(cmd, **kwargs)
    if proc.returncode != 0:
        shown = " ".join(map(str, cmd)) if isinstance(cmd, list | tuple) else str(cmd)
        raise AssertionError(f"command failed with exit {proc.returncode}: {shown}\n"
                             f"--- stdout ---\n{_tail(proc.stdout)}\n--- stderr ---\n{_tail(proc.stderr)}")
    return proc
