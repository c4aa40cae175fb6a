"""A real tmpfs mounted for one test (root only): the memory and L3 store tests need their own."""

from __future__ import annotations

import contextlib
import subprocess

import pytest


@contextlib.contextmanager
def mounted_tmpfs(path, options: str):
    """Mount a tmpfs with `options` at `path` (created) for the block; skip the test with the
    reason when this machine cannot mount one (not root, no mount namespace)."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount tmpfs -o {options} here: {r.stderr.strip() or r.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
