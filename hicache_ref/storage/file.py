"""`file`: an L3 store in a directory: one 0600 file per object, atomic writes, size-bounded LRU.

Spec `file:DIR[,max_bytes=SIZE][,digest=xxh3|sha256]`. Always bounded: by `max_bytes`, refused when
the filesystem cannot hold it, or else by half of the room there at open. Writes go to a temporary
file renamed into place, so readers never see part of an object; recency is the file's mtime,
shared by every client. Reads and writes move the pool's runs with preadv/writev, no extra copy.

The directory is the store's alone (hicache_ref.storage.file_folder: its marker, a user's folder
refused, which files are its objects); a symbolic link is never followed (O_NOFOLLOW), and an
mtime is set only on an object the store opened. An eviction that fails (a file it may not remove) leaves the store refusing writes past its bound,
and `last_error` says which file and why.
"""

from __future__ import annotations

import errno
import hashlib
import inspect
import os
import re
import secrets
import stat
import threading
from collections import OrderedDict

from hicache_ref.storage.base import StorageBackend
from hicache_ref.storage.file_folder import (
    MARKER,  # noqa: F401 - the store's marker, named here too (its users import it with FileStorage)
    SUFFIX,
    TMP_PREFIX,
    UPSTREAM_SUFFIX,
    check_owned,
    is_object_name,
    is_own_object,
    mark,
    unmark,
)
from hicache_ref.storage.integrity import DEFAULT_DIGEST
from hicache_ref.storage.objects import file_names
from hicache_ref.storage.registry import parse_options

_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")
# Other clients' objects are seen at a rescan, which stats every object: one comes once this client
# has written this share of the bound since the last. So the directory exceeds its bound by at most
# that share a client before they count each other's objects, whatever the store's size, and a
# store far below its bound (the common case) is not rescanned for nothing.
RESCAN_SHARE = 16
TMP_NAME_BYTES = 8  # random bytes in a temporary file's name (hex): unguessable by another user


def file_name(key: str) -> str:
    """The object's file name inside the directory."""
    if _PLAIN.match(key):
        return key + SUFFIX
    return "h-" + hashlib.sha256(key.encode()).hexdigest() + SUFFIX


IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024  # buffers per writev / preadv


def _views(segments) -> list:
    """The segments' bytes as 1-D uint8 arrays (len() is bytes) for writev / preadv: a contiguous
    segment whole, one buffer (most are: staged pages, trailers), else its rows."""
    out = []
    for seg in segments:
        if not seg.nbytes:
            continue
        if seg.flags.c_contiguous:
            out.append(seg.reshape(-1))
        else:
            out.extend(row for row in seg if row.nbytes)
    return out


def _advance(views: list, n: int) -> None:
    """Drop the first `n` bytes of `views` (after a short writev / preadv)."""
    while views and n >= len(views[0]):
        n -= len(views[0])
        views.pop(0)
    if views and n:
        views[0] = views[0][n:]


class FileStorage(StorageBackend):
    name = "file"
    # an object is seen only once renamed into place, whole: its trailer may come last (see base)
    late_trailer = True

    # ---- construction and the bound (one block) --------------------------------------
    DEFAULT_ROOM_FRACTION = 0.5  # the bound without max_bytes: this share of free + stored bytes

    def __init__(self, directory: str, max_bytes: int | None = None, digest: str = DEFAULT_DIGEST):
        if not isinstance(directory, str | os.PathLike) or not str(directory):
            raise ValueError(f"directory: expected a path, got {directory!r}")
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                      or max_bytes <= 0):
            raise ValueError(f"max_bytes: expected a positive integer or None, got {max_bytes!r}")
        directory = os.path.abspath(os.fspath(directory))
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise ValueError(f"directory: {directory} exists and is not a directory")
        super().__init__(digest)
        self.directory = directory
        self._lock = threading.Lock()
        self._index: OrderedDict[str, int] = OrderedDict()  # file name -> size, oldest first
        self._bytes = 0
        self._since_scan = 0  # bytes this client wrote since its last rescan
        self.last_error: str | None = None  # the first failure of a write or an eviction, with the file
        if os.path.isdir(directory):
            check_owned(directory)
            self._rescan()  # read only: the objects already there count as room
        free = self.filesystem_free_bytes(directory)
        room = free + self._bytes
        if max_bytes is not None and max_bytes > room:
            raise ValueError(f"max_bytes: {max_bytes} bytes is more than the filesystem of {directory} can hold "
                             f"({free} bytes free + {self._bytes} bytes of objects already there)")
        self.max_bytes_default = max_bytes is None
        self.max_bytes = int(room * self.DEFAULT_ROOM_FRACTION) if max_bytes is None else max_bytes
        if self.max_bytes <= 0:
            raise ValueError(f"directory: the filesystem of {directory} has no free space for a store "
                             "(the default bound is half its free space); free some or give max_bytes")
        self.made_directory = not os.path.isdir(directory)  # by this open: `abandon` takes it back
        os.makedirs(directory, mode=0o700, exist_ok=True)
        mark(directory)
        self._rescan()

    def abandon(self) -> None:
        """Close, and remove the folder this open made while it holds nothing but the marker (an
        open refused by its caller leaves no store behind)."""
        self.close()
        if self.made_directory:
            unmark(self.directory)

    @classmethod
    def from_spec(cls, args: str, spec: str) -> FileStorage:
        parts = args.split(",")
        if not parts[0].strip():
            raise ValueError(f"storage spec {spec!r}: DIR: expected file:DIR[,max_bytes=SIZE][,digest=NAME]")
        opts = parse_options([p for p in parts[1:] if p.strip()], spec, {"max_bytes": "size", "digest": "digest"})
        try:
            return cls(parts[0].strip(), **opts)
        except (ValueError, OSError) as e:
            part = "" if str(e).startswith("max_bytes:") else "DIR: "
            why = f"{e.filename}: {e.strerror}" if isinstance(e, OSError) and e.strerror and e.filename else e
            raise ValueError(f"storage spec {spec!r}: {part}{why}") from None

    @staticmethod
    def filesystem_free_bytes(path: str) -> int:
        """Bytes an unprivileged writer may still use on the filesystem of `path`, or of its nearest
        existing parent when `path` is not there yet (statvfs: f_bavail x f_frsize)."""
        while not os.path.exists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize

    @property
    def stored_bytes(self) -> int:
        """Bytes of objects this client counts in the directory (as of its last scan and writes)."""
        return self._bytes

    def _name(self, key: str) -> str:
        """The object's file name: the harness's, or upstream HiCacheFile's under its format."""
        return key + UPSTREAM_SUFFIX if self.object_format.upstream else file_name(key)

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, self._name(key))

    def upstream_objects(self, fmt, page_key, parts):
        return file_names(fmt, page_key, parts)

    def _rescan(self) -> None:
        found = []
        with os.scandir(self.directory) as it:
            for entry in it:
                if is_object_name(entry.name):
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if is_own_object(st):  # never a link, a hard link to another file, or another user's
                        found.append((st.st_mtime_ns, entry.name, st.st_size))
        with self._lock:
            self._since_scan = 0
            # File times tick at the kernel's coarse clock (a few ms): ties keep this client's order.
            known = {name: i for i, name in enumerate(self._index)}
            found.sort(key=lambda f: (f[0], known.get(f[1], -1)))
            self._index = OrderedDict((name, size) for _, name, size in found)
            self._bytes = sum(size for _, _, size in found)

    @property
    def rescan_bytes(self) -> int:
        """Bytes this client writes between two rescans of the directory (RESCAN_SHARE of the bound)."""
        return max(1, self.max_bytes // RESCAN_SHARE)

    def _evict(self) -> None:
        with self._lock:
            due = self._since_scan >= self.rescan_bytes
        if due:
            self._rescan()
        with self._lock:
            victims = []
            while self._bytes > self.max_bytes and self._index:
                name, size = self._index.popitem(last=False)
                self._bytes -= size
                victims.append(name)
        kept = []
        for name in victims:
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass
            except OSError as e:  # still there, still counted: the bound holds by refusing writes
                self._note(os.path.join(self.directory, name), "cannot be evicted", e)
                kept.append(name)
        if kept:
            with self._lock:
                for name in kept:
                    size = self._size(name)
                    self._index[name] = size
                    self._index.move_to_end(name, last=False)
                    self._bytes += size

    def _size(self, name: str) -> int:
        try:
            return os.lstat(os.path.join(self.directory, name)).st_size
        except OSError:
            return 0

    def _note(self, path: str, what: str, e: OSError) -> None:
        if self.last_error is None:
            self.last_error = f"{path}: {what} ({e.strerror or e})"

    # ---- hooks -------------------------------------------------------------------------
    def _contains(self, key: str) -> bool:
        try:
            return stat.S_ISREG(os.lstat(self._path(key)).st_mode)  # a link is not an object
        except FileNotFoundError:
            return False

    def _write(self, items, trailer_ready=None) -> list[bool]:
        # one draw of the random source for the batch's temporary names, not a getrandom call each
        salt = secrets.token_bytes(TMP_NAME_BYTES * len(items))
        step = TMP_NAME_BYTES
        late = trailer_ready is not None and "last_ready" in inspect.signature(self._write_one).parameters
        out = []
        for i, (key, segs) in enumerate(items):
            token = salt[i * step : (i + 1) * step].hex()
            if late:
                out.append(self._write_one(key, segs, token, last_ready=lambda i=i: trailer_ready(i)))
                continue
            if trailer_ready is not None:  # a `_write_one` override without last_ready: whole, once sealed
                trailer_ready(i)
            out.append(self._write_one(key, segs, token))
        return out

    def _write_one(self, key, segments, token: str | None = None, last_ready=None) -> bool:
        """`last_ready`: called before the last segment is written (it holds its bytes after)."""
        size = sum(s.nbytes for s in segments)
        if size > self.max_bytes:
            return False
        tmp = os.path.join(self.directory, f"{TMP_PREFIX}{token or secrets.token_hex(TMP_NAME_BYTES)}")
        fd = None
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                parts = [segments] if last_ready is None else [segments[:-1], segments[-1:]]
                for i, part in enumerate(parts):
                    if i:
                        last_ready()
                    views = _views(part)
                    while views:
                        _advance(views, os.writev(fd, views[:IOV_MAX]))
            finally:
                os.close(fd)
            os.replace(tmp, self._path(key))
        except BaseException as e:  # the temporary file never outlives a failed write
            try:
                if fd is not None:  # ours: a name that was taken (O_EXCL) is someone else's
                    os.unlink(tmp)
            except FileNotFoundError:
                pass
            if isinstance(e, OSError):
                self._note(self._path(key), "cannot be written", e)
            if isinstance(e, Exception):  # this object failed (its seal too): the next may not
                return False
            raise
        name = self._name(key)
        with self._lock:
            self._bytes += size - self._index.pop(name, 0)
            self._index[name] = size
            self._since_scan += size
            over = self._bytes > self.max_bytes or self._since_scan >= self.rescan_bytes
        if over:
            self._evict()
            with self._lock:
                stuck = self._bytes > self.max_bytes
            if stuck:  # eviction failed: this object goes, so the store keeps to its bound
                self._discard(key)
                return False
        return True

    def _discard(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            return
        with self._lock:
            self._bytes -= self._index.pop(self._name(key), 0)

    def _read_into(self, key, targets) -> int:
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return -1
        except OSError as e:
            if e.errno == errno.ELOOP:  # a link planted as an object: not read, not touched
                return -1
            raise
        try:
            st = os.fstat(fd)
            if not is_own_object(st):
                return -1
            size = st.st_size
            views, off = _views(targets), 0
            while views:
                n = os.preadv(fd, views[:IOV_MAX], off)
                if n <= 0:
                    break
                off += n
                _advance(views, n)
            os.utime(fd)  # recency for the LRU, shared by every client of the directory
        finally:
            os.close(fd)
        name = self._name(key)
        with self._lock:
            if name in self._index:
                self._index.move_to_end(name)
        return size


STORE = FileStorage
