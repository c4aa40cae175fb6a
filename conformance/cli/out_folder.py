"""The output folder of a `hicache conform` run: one run at a time (a lock), nothing but reports left.

OUT is new, empty, or holds a previous conform report (replaced, said on stderr); anything else
is refused naming --out before it is touched. The child's ini, target rows and selection
counts live in a private work folder that goes, with the lock file, when the run ends.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import sys
from pathlib import Path

from conformance.common.errors import CliError, clip, clip_path

LOCK_NAME = ".hicache-conform.lock"
# in this order: the verdicts go first
RESULTS = ("summary.json", "report.json", "report.html", "junit.xml")
TARGET_ROWS = "targets"  # WORK/targets/<target>.json: the rows conformance/suites/test_targets.py writes
WORK_NAME = ".hicache-conform-work"  # OUT/WORK: the child's ini, target rows and selection counts
# What earlier versions left in OUT besides RESULTS (deleted when OUT is reused), and the
# temporary files of an atomic write cut short: all of them mark a previous conform report.
LEFTOVERS = (LOCK_NAME, "pytest.ini", TARGET_ROWS, WORK_NAME)
_TMP_RESULT = re.compile(r"\.(summary\.json|report\.json|report\.html)\.\d+\.tmp")


def foreign_files(out: Path) -> list[str]:
    """Names in OUT that no conform run writes (sorted); [] for a new, empty or report folder."""
    if not out.is_dir():
        return []
    odd = []
    for entry in out.iterdir():
        name = entry.name
        if name == WORK_NAME and entry.is_dir():
            continue
        if name == TARGET_ROWS and entry.is_dir() and all(f.suffix == ".json" for f in entry.iterdir()):
            continue
        if ((name in RESULTS or name in LEFTOVERS) and not entry.is_dir()) or _TMP_RESULT.fullmatch(name):
            continue
        odd.append(name)
    return sorted(odd)


def _lock(path: Path) -> int:
    """An fd holding an exclusive flock on `path`, the file that is there now: a lock file a
    finishing run unlinked under us is not it (retried). BlockingIOError while another run holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise BlockingIOError(owner) from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def claim_out(out: Path, given: bool) -> int:
    """Create OUT, lock it for this run (fd returned; the kernel drops the lock when this process
    dies, however it dies), and delete the previous run's results, saying so on stderr when a
    report is replaced. CliError naming --out, before anything is changed, for an OUT that is a
    file, cannot be written, is another run's, or holds files that are not a conform report."""
    shown = clip_path(out)
    if out.exists() and not out.is_dir():
        raise CliError("--out", f"{shown}: exists and is not a folder")
    odd = foreign_files(out)
    if odd:
        more = f" and {len(odd) - 1} more" if len(odd) > 1 else ""
        raise CliError("--out", f"{shown}: holds {clip(repr(odd[0]))}{more}, which no hicache conform run "
                                "wrote; pass a new or empty folder, or one holding a previous conform report")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = _lock(out / LOCK_NAME)
    except BlockingIOError as busy:
        raise CliError("--out", f"{shown}: another hicache conform run (pid {busy}) is writing there; "
                                "wait for it or pass another --out") from None
    except OSError as e:
        hint = "" if given else " (the current folder is not writable: pass --out DIR)"
        raise CliError("--out", f"{shown}: cannot be written ({e.strerror or e}){hint}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    old = [name for name in RESULTS if (out / name).exists()]
    if old:
        print(f"hicache: warning: --out {shown}: replacing the previous report ({', '.join(old)})",
              file=sys.stderr, flush=True)
    for name in RESULTS + ("pytest.ini",):
        (out / name).unlink(missing_ok=True)
    for entry in out.iterdir():
        if _TMP_RESULT.fullmatch(entry.name):
            entry.unlink(missing_ok=True)
    shutil.rmtree(out / TARGET_ROWS, ignore_errors=True)
    shutil.rmtree(out / WORK_NAME, ignore_errors=True)
    return fd


def release_out(out: Path, fd: int) -> None:
    """The run is over: its work folder goes, then the lock file (still held, so no run can be
    between open and flock on it unseen: _lock checks the inode), then the lock."""
    try:
        shutil.rmtree(out / WORK_NAME, ignore_errors=True)
        (out / LOCK_NAME).unlink(missing_ok=True)
    finally:
        os.close(fd)
