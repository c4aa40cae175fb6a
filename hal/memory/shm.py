"""Shared host-buffer files: safe creation, attaching, reaping after a crash, and mount checks.

Host KV is user data, so a shared file is created O_EXCL with mode 0600 under an
unguessable name, and unlinked as soon as every user has mapped it. Its name carries the
creator's pid and process start time (`hicache-kv-<pid>-<start>-<random>`) so that files
left by a process that died without cleaning up (SIGKILL, OOM kill) are recognised and
removed by the next allocation in the same directory; the start time guards against a
recycled pid keeping a dead process's file alive. Pids are read in the caller's pid namespace:
processes sharing a directory (TP ranks) must share one, or a live creator would look dead.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from typing import NamedTuple

from hal.memory.vm import thp_mode

PREFIX = "hicache-kv-"
_NAME_RE = re.compile(r"^hicache-kv-(\d+)-(\d+)-[0-9a-f]{32}$")
THP_SHMEM_PATH = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
MOUNTS_PATH = "/proc/self/mounts"


def _start_time(pid: int) -> int | None:
    """Process start time in clock ticks since boot (field 22 of /proc/<pid>/stat); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses; fields resume after the last ')'.
    return int(text[text.rindex(")") + 2 :].split()[19])


def new_file_name() -> str:
    return f"{PREFIX}{os.getpid()}-{_start_time(os.getpid())}-{secrets.token_hex(16)}"


def owner_alive(name: str) -> bool | None:
    """Whether the process that created `name` still runs; None for names that are not ours."""
    m = _NAME_RE.match(name)
    if m is None:
        return None
    pid, start = int(m.group(1)), int(m.group(2))
    return _start_time(pid) == start


def reap_dead_files(directory: str) -> list[str]:
    """Remove our files in `directory` whose creator has died; returns the removed paths.

    Only regular files of this euid count: in a sticky shared directory such as /dev/shm another
    user's file cannot be unlinked (and root must not), so a name planted by someone else must
    neither block our allocation nor be removed. Symlinks are never followed or removed.
    """
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if owner_alive(entry.name) is not False:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            with contextlib.suppress(FileNotFoundError, PermissionError):
                os.unlink(entry.path)
                removed.append(entry.path)
    return removed


def validate_dir(directory, nbytes: int) -> str:
    """Absolute path of a usable shared_dir; ValueError naming shared_dir otherwise."""
    if not isinstance(directory, str | os.PathLike):
        raise ValueError(f"shared_dir: expected a directory path, got {directory!r}")
    path = os.path.abspath(os.fspath(directory))
    if not os.path.exists(path):
        raise ValueError(f"shared_dir: {path} does not exist")
    if not os.path.isdir(path):
        raise ValueError(f"shared_dir: {path} is not a directory")
    # access() also reports a read-only mount (EROFS), which root's DAC override does not hide.
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"shared_dir: {path} is not writable")
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    if free < nbytes:
        raise ValueError(f"shared_dir: {path} has {free} bytes free, {nbytes} needed (nbytes)")
    return path


def create_file(directory: str, nbytes: int) -> tuple[int, str]:
    """(fd, path) of a new file of `nbytes` in `directory`; nothing is left behind on failure."""
    path = os.path.join(directory, new_file_name())
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        raise ValueError(f"shared_dir: cannot create a file in {directory}: {e.strerror}") from e
    try:
        os.fchmod(fd, 0o600)  # a default ACL on the directory could have widened the mode
        os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    return fd, path


def open_file(path) -> tuple[int, int]:
    """(fd, size) of an existing shared file, refusing one that is not ours or is readable by others."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ValueError(f"path: {path} does not exist (already unlinked?)") from None
    except OSError as e:
        raise ValueError(f"path: cannot open {path}: {e.strerror}") from e
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "is not a regular file"
    elif st.st_uid != os.geteuid():
        problem = f"belongs to uid {st.st_uid}, not {os.geteuid()}"
    elif st.st_mode & 0o077:
        problem = f"has mode {stat.S_IMODE(st.st_mode):o}; host KV files must be 0600"
    elif st.st_size <= 0:
        problem = "is empty"
    if problem:
        os.close(fd)
        raise ValueError(f"path: {path} {problem}")
    return fd, st.st_size


def _unescape(field: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: str, mounts: str = MOUNTS_PATH) -> tuple[str, str, list[str]]:
    """(mount point, fs type, options) of the mount holding `path` (symlinks resolved), from
    `mounts` (/proc/self/mounts; another file for `hicache doctor`'s synthetic hosts)."""
    real = os.path.realpath(path)
    best = ("/", "?", [])
    with open(mounts) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 4:
                continue
            mnt = _unescape(fields[1])
            inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
            # Later lines win for the same mount point: they are mounted on top.
            if inside and len(mnt) >= len(best[0]):
                best = (mnt, fields[2], fields[3].split(","))
    return best


class SharedHugePages(NamedTuple):
    """Whether files in a directory can be mapped on 2 MB pages, and why not."""

    mount_point: str
    fstype: str
    huge: str  # the tmpfs huge= option in force; "never" when absent
    shmem_enabled: str | None  # selected value of THP_SHMEM_PATH; None when unreadable
    problem: str | None  # None (2 MB pages possible), "deny", "not_tmpfs" or "no_huge"
    warning: str | None  # one line saying why pages will be 4 KB; None when they can be 2 MB


def shared_huge_pages(directory: str, *, mounts: str = MOUNTS_PATH,
                      shmem_enabled_path: str = THP_SHMEM_PATH) -> SharedHugePages:
    """Huge-page prospects of shared files in `directory`: shmem_enabled=deny turns them off
    everywhere, =force on for every tmpfs; otherwise the tmpfs huge= mount option decides."""
    mnt, fstype, options = mount_of(directory, mounts)
    huge = ([o.partition("=")[2] for o in options if o.startswith("huge=")] or ["never"])[-1]
    mode = thp_mode(shmem_enabled_path)
    problem = warning = None
    if mode == "deny":
        problem, warning = "deny", f"{shmem_enabled_path} is 'deny'; shared pages are 4 KB"
    elif fstype != "tmpfs":
        problem = "not_tmpfs"
        warning = f"{fstype} at {mnt} does not back shared mappings with huge pages; shared pages are 4 KB"
    elif mode != "force" and huge in ("never", "deny"):
        given = any(o.startswith("huge=") for o in options)
        problem, warning = "no_huge", (f"tmpfs at {mnt} is mounted {f'with huge={huge}' if given else 'without huge='}; "
                                       "shared pages fault in as 4 KB")
    return SharedHugePages(mnt, fstype, huge, mode, problem, warning)


def huge_page_warning(directory: str) -> str | None:
    """Why shared pages in `directory` fault in as 4 KB, or None when they can be 2 MB at fault
    time (MADV_COLLAPSE, Linux >= 6.1, may still move them onto 2 MB pages afterwards)."""
    return shared_huge_pages(directory).warning
