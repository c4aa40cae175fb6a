"""The folder a file L3 store owns, and the files in it that are its objects.

A folder is a store's when it carries the marker file MARKER, written (O_EXCL, never through a
link) when the store is made in an empty or new folder, or in one holding only objects and
temporary files (as upstream HiCacheFile leaves it); a folder holding anything else is refused
(`check_owned`), so eviction never removes a user's files. In a store's folder, only a regular
file named as an object, owned by this user and under one name (`is_own_object`: no hard link
to another file) is counted, read, touched or evicted; a symbolic link is never followed.
"""

from __future__ import annotations

import os
import stat

SUFFIX = ".kv"
UPSTREAM_SUFFIX = ".bin"  # upstream HiCacheFile's objects: `<its key>.bin`
MARKER = ".hicache-file-store"  # the file that makes a directory a store's
TMP_PREFIX = ".tmp-"  # a write's temporary file, renamed into place whole
_MARKER_TEXT = b"a hicache file L3 store: its objects are *.kv (and upstream *.bin) files here\n"


def is_object_name(name: str) -> bool:
    """Whether `name` is named as an object (the harness's or upstream's; never a dot file)."""
    return name.endswith((SUFFIX, UPSTREAM_SUFFIX)) and not name.startswith(".")


def is_own_object(st: os.stat_result) -> bool:
    """Whether a file of status `st` (lstat, or fstat of an open object) is one the store wrote: a
    regular file of this user with no other name (a hard link is another file's; no name at all is
    an object a writer replaced after it was opened, still whole)."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink <= 1


def check_owned(directory: str) -> None:
    """ValueError when `directory` holds anything but a store's marker, objects and temporary
    files: a user's folder is not a store, and its files are never evicted."""
    if os.path.islink(directory):
        raise ValueError(f"directory: {directory} is a symbolic link; name the folder it points at")
    try:
        marker = os.lstat(os.path.join(directory, MARKER))
    except FileNotFoundError:
        marker = None
    if marker is not None:
        if not stat.S_ISREG(marker.st_mode):
            raise ValueError(f"directory: {directory}/{MARKER} is not a regular file; it is not a store")
        return
    with os.scandir(directory) as it:
        foreign = [e.name for e in it if not (is_object_name(e.name) and e.is_file(follow_symlinks=False))
                   and not e.name.startswith(TMP_PREFIX)]
    if foreign:
        raise ValueError(f"directory: {directory} holds files a file store did not write (e.g. "
                         f"{sorted(foreign)[0][:80]!r}) and no {MARKER} marker; give an empty or new folder")


def mark(directory: str) -> None:
    """The marker file (O_EXCL, never through a link): this folder is a store's from now on."""
    try:
        fd = os.open(os.path.join(directory, MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    try:
        os.write(fd, _MARKER_TEXT)
    finally:
        os.close(fd)


def unmark(directory: str) -> None:
    """Remove `directory` when it holds only the marker (a store made and never written); else keep it."""
    try:
        with os.scandir(directory) as it:
            if [e.name for e in it] != [MARKER]:
                return
        os.unlink(os.path.join(directory, MARKER))
        os.rmdir(directory)
    except OSError:
        pass
