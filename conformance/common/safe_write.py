"""Every file the `hicache` command writes, written one safe way: a planted link never redirects it,
a failed write never leaves half a file, and a full disk is one line naming the file.

A file is written to a temporary name in its own folder (O_EXCL, unguessable), flushed to disk,
then renamed over the target, so a reader sees the old file or the new one. A target that is a
symbolic link is refused, not followed. ENOSPC, EROFS and EDQUOT become a CliError naming the
file (exit 2); the temporary file goes and the previous file stays as it was. Lock files are
opened O_NOFOLLOW and never truncated through a link or a second hard link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from conformance.common.errors import CliError, clip_path

_FULL = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
         errno.EROFS: "the file system is read-only", errno.EFBIG: "file too large"}
TMP_SUFFIX = ".tmp"
TMP_HEX = 16  # the random part of a temporary name: 16 hex digits


def temp_name(name: str) -> str:
    """`.<name>.<16 random hex>.tmp`: the name a write of `name` goes through."""
    return f".{name}.{secrets.token_hex(TMP_HEX // 2)}{TMP_SUFFIX}"


def is_temp_name(name: str, of: str | None = None) -> bool:
    """`name` is a temporary name of a write (of `of`, when given) that a killed run may leave."""
    if not (name.startswith(".") and name.endswith(TMP_SUFFIX)):
        return False
    stem, _, tail = name[1: -len(TMP_SUFFIX)].rpartition(".")
    ok = len(tail) == TMP_HEX and all(c in "0123456789abcdef" for c in tail) and bool(stem)
    return ok and (of is None or stem == of)


def write_failed(path: str | os.PathLike, e: OSError) -> CliError:
    """The one line for a write of `path` that failed with `e`; the previous file is kept."""
    why = _FULL.get(e.errno, e.strerror or str(e))
    return CliError(clip_path(path), f"cannot be written: {why} (nothing written; any previous file is as it was)")


def refuse_link(path: Path) -> None:
    """CliError naming `path` when it is a symbolic link: a write would land where the link points."""
    if path.is_symlink():
        raise CliError(clip_path(path), "is a symbolic link; refusing to write through it (remove it or "
                                        "name another file)")


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_target(path: str | os.PathLike) -> Path:
    """`path` as a file this command may replace: absent or a regular file (never a link, a FIFO, a
    device such as /dev/null, a socket or a directory: a rename would replace the special file), in
    a folder that exists and is not itself a symbolic link. CliError naming it otherwise."""
    path = Path(path)
    refuse_link(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise CliError(clip_path(path), f"cannot be checked ({e.strerror or e})") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
        raise CliError(clip_path(path), f"is {kind}; a command writes regular files only (name a file)")
    folder = path.parent
    if folder.is_symlink():
        raise CliError(clip_path(folder), "is a symbolic link; refusing to write through it (name the folder "
                                          "it points at)")
    if not folder.is_dir():
        raise CliError(clip_path(folder), "no such folder")
    if (why := unwritable(folder)) is not None:
        raise CliError(clip_path(path), f"cannot be written: {why} (nothing written)")
    return path


def unwritable(folder: str | os.PathLike) -> str | None:
    """Why no file can be made in `folder`, or in its nearest existing parent when it is not there
    yet (where it would be made): a read-only file system, no permission; None when one can."""
    at = Path(folder)
    while not at.exists() and at != at.parent:
        at = at.parent
    if os.access(at, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(at).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return _FULL[errno.EROFS] if read_only else "permission denied"


def check_targets(paths) -> list[Path]:
    """check_target for every output of a command, before it writes the first (none is half done)."""
    return [check_target(p) for p in paths]


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, binary: bool = False, mode: int = 0o644):
    """A file object to write `path` through: on a clean exit it is flushed, fsynced and renamed over
    `path`; on any exception (Ctrl-C included) the temporary file is removed and `path` untouched.
    Text mode writes UTF-8."""
    path = check_target(path)
    folder = path.parent
    tmp = folder / temp_name(path.name)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        raise write_failed(path, e) from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # a link planted meanwhile is replaced, never followed
    except OSError as e:
        _remove(tmp)
        if e.errno in _FULL:
            raise write_failed(path, e) from None
        raise
    except BaseException:
        _remove(tmp)
        raise
    _sync_folder(folder)


def _remove(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def _sync_folder(folder: Path) -> None:
    """The rename itself on disk (best effort: some file systems refuse fsync on a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text(path: str | os.PathLike, text: str) -> None:
    """`text` (UTF-8) as the whole of `path`, atomically (atomic_file)."""
    with atomic_file(path) as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """`data` as the whole of `path`, atomically (atomic_file)."""
    with atomic_file(path, binary=True) as f:
        f.write(data)


def open_lock(path: str | os.PathLike) -> int:
    """An O_RDWR fd on the lock file `path`, created when missing, never truncated on open; CliError
    naming it for a symbolic link, a file that is not regular, or one with a second hard link (its
    content would be another file's)."""
    path = Path(path)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CliError(clip_path(path), "is a symbolic link; a lock file must be a plain file "
                                            "(remove it)") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "is not a regular file" if not stat.S_ISREG(st.st_mode) else "has another hard link"
        raise CliError(clip_path(path), f"{what}; a lock file must be a plain file of its own (remove it)")
    os.set_blocking(fd, True)
    return fd
