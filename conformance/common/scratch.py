"""Scratch folders the tools write into (a benchmark's file store), left as found even after a SIGKILL.

Every one lives in `$TMPDIR/hicache-scratch-<uid>/<pid>-<random>`. A run removes its own when it
ends; a run that was killed cannot, so each new one first removes the folders there whose process
is gone. So $TMPDIR holds, at most, the folders of runs still alive and of the last killed one,
until the next run starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from conformance.common.errors import CliError, clip_path


def parent() -> Path:
    """$TMPDIR/hicache-scratch-<uid>: this user's, 0700, never a link (CliError naming it otherwise)."""
    where = Path(tempfile.gettempdir()) / f"hicache-scratch-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        where.mkdir(mode=0o700)
    st = os.lstat(where)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise CliError(clip_path(where), "is not a folder of this user's (a link, a file or another user's); "
                                         "remove it or set TMPDIR")
    return where


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_dead(where: Path) -> None:
    """Remove the scratch folders in `where` whose process is gone (a run that was killed)."""
    for entry in os.scandir(where):
        pid, _, _ = entry.name.partition("-")
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)


def make_dir(prefix: str) -> str:
    """A new scratch folder (0700) named after this process; remove it with shutil.rmtree when done."""
    where = parent()
    sweep_dead(where)
    return tempfile.mkdtemp(prefix=f"{os.getpid()}-{prefix}", dir=where)


@contextlib.contextmanager
def directory(prefix: str):
    """make_dir as a context: the folder's path, removed on exit."""
    path = make_dir(prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
