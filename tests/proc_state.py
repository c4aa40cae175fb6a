"""Helpers the tests share for looking at processes through /proc."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for whoever inherited it to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name in parentheses may hold spaces or ')': the state follows the last ')'
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
