"""The output folder of a `hicache conform` run: one run at a time (a lock), only its own files touched.

OUT is new, empty, or holds a previous conform report: the files its manifest
(OUT/.hicache-manifest.json) names. Those are replaced (said on stderr); anything else in OUT
(a user's folder, a junit.xml no run wrote) makes the run refuse, naming it, before OUT is
touched. The lock is a plain file opened O_NOFOLLOW; every report goes through
conformance.common.safe_write. The child's ini, target rows, junit and selection counts live in a
private work folder that goes, with the lock file, when the run ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
from pathlib import Path

from conformance.common.errors import CliError, clip, clip_path
from conformance.common.safe_write import is_temp_name, open_lock, write_text

LOCK_NAME = ".hicache-conform.lock"
MANIFEST_NAME = ".hicache-manifest.json"
# in this order: the verdicts go first
RESULTS = ("summary.json", "report.json", "report.html", "junit.xml")
TARGET_ROWS = "targets"  # WORK/targets/<target>.json: the rows conformance/suites/test_targets.py writes
WORK_NAME = ".hicache-conform-work"  # OUT/WORK: the child's ini, junit, target rows and selection counts
SHOWN_NAMES = 3  # a refusal names this many foreign files, then counts the rest


def _manifest(out: Path) -> set[str]:
    """The names OUT's manifest says a conform run wrote; empty when there is none. A manifest
    that is a link, not JSON or not a list of plain names counts as none (its files are then foreign)."""
    path = out / MANIFEST_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return set()
    try:
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read(1 << 16))
    except (OSError, ValueError):
        return set()
    names = data.get("written") if isinstance(data, dict) else None
    if not isinstance(names, list):
        return set()
    return {n for n in names if isinstance(n, str) and n and "/" not in n and n not in (".", "..")}


def foreign_files(out: Path) -> list[str]:
    """Names in OUT that no conform run wrote (sorted); [] for a new, empty or report folder."""
    if not out.is_dir():
        return []
    ours = _manifest(out) | {LOCK_NAME, MANIFEST_NAME}
    odd = []
    for entry in out.iterdir():
        name = entry.name
        if name in ours and (name == WORK_NAME or not entry.is_dir() or entry.is_symlink()):
            continue
        if any(is_temp_name(name, of) for of in RESULTS + (MANIFEST_NAME,)):
            continue
        odd.append(name)
    return sorted(odd)


def _refuse_foreign(out: Path, odd: list[str]) -> CliError:
    shown = ", ".join(clip(repr(n)) for n in odd[:SHOWN_NAMES])
    more = f" and {len(odd) - SHOWN_NAMES} more" if len(odd) > SHOWN_NAMES else ""
    return CliError("--out", f"{clip_path(out)}: holds {shown}{more}, which no hicache conform run wrote "
                             f"(not in {MANIFEST_NAME}); pass a new or empty folder, or one holding only a "
                             "previous conform report")


def _lock(path: Path) -> int:
    """An fd holding an exclusive flock on `path`, the file that is there now: a lock file a
    finishing run unlinked under us is not it (retried). BlockingIOError while another run holds it."""
    while True:
        fd = open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise BlockingIOError(clip(owner, 20)) from None
        try:
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _remove(path: Path) -> None:
    """Remove what a previous run wrote at `path`: a file or link is unlinked (never followed), the
    work folder removed whole (rmtree refuses a link)."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


def claim_out(out: Path, given: bool) -> int:
    """Create OUT, lock it for this run (fd returned; the kernel drops the lock when this process
    dies, however it dies), and delete the previous run's files (its manifest's), saying so on
    stderr when a report is replaced. CliError naming --out, before anything is changed, for an OUT
    that is a file, cannot be written, is another run's, or holds files no conform run wrote."""
    shown = clip_path(out)
    if out.exists() and not out.is_dir():
        raise CliError("--out", f"{shown}: exists and is not a folder")
    odd = foreign_files(out)
    if odd:
        raise _refuse_foreign(out, odd)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = _lock(out / LOCK_NAME)
    except BlockingIOError as busy:
        raise CliError("--out", f"{shown}: another hicache conform run (pid {busy}) is writing there; "
                                "wait for it or pass another --out") from None
    except CliError:
        raise
    except OSError as e:
        hint = "" if given else " (the current folder is not writable: pass --out DIR)"
        raise CliError("--out", f"{shown}: cannot be written ({e.strerror or e}){hint}") from None
    try:
        odd = foreign_files(out)  # again, under the lock: a file planted meanwhile is not ours either
        if odd:
            raise _refuse_foreign(out, odd)
        os.ftruncate(fd, 0)  # our own plain file (open_lock checked): no link to write through
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        ours = _manifest(out)
        old = [name for name in RESULTS if name in ours and (out / name).exists()]
        if old:
            print(f"hicache: warning: --out {shown}: replacing the previous report ({', '.join(old)})",
                  file=sys.stderr, flush=True)
        for name in sorted(ours):
            _remove(out / name)
        for entry in out.iterdir():
            if any(is_temp_name(entry.name, of) for of in RESULTS + (MANIFEST_NAME,)):
                _remove(entry)
        # every name this run may write, listed before any is written: a run killed halfway
        # leaves only files the next run knows as its own
        write_text(out / MANIFEST_NAME, json.dumps({"written": sorted(RESULTS + (WORK_NAME,))}) + "\n")
    except BaseException:
        os.close(fd)
        raise
    return fd


def release_out(out: Path, fd: int) -> None:
    """The run is over: its work folder goes, then the lock file (still held, so no run can be
    between open and flock on it unseen: _lock checks the inode), then the lock."""
    try:
        _remove(out / WORK_NAME)
        with contextlib.suppress(FileNotFoundError):
            (out / LOCK_NAME).unlink()
    finally:
        os.close(fd)
