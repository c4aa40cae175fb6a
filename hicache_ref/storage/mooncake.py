"""`mooncake`: pages in a Mooncake distributed store (`MooncakeDistributedStore`, protocol tcp).

Spec `mooncake:METADATA_URL,MASTER_ADDR[,segment=SIZE][,buffer=SIZE][,host=IP][,digest=NAME]`.
`mooncake:auto[,...]` is a client of a loopback cluster of its own (hicache_ref.storage.mooncake_cluster).
The wheel is the `[mooncake]` extra, which needs apt `libibverbs1 libnuma1`.
Pages of a registered host pool move straight between the pool and the store. A get of an object
whose replica lies in this client's own segment reads it in place (`local_reads`).
The client library listens on all interfaces; it warns once per process (`exposed_listeners`).
Segments, copies, semantics and the listeners' sources: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import sys
import threading
from urllib.parse import urlparse

import numpy as np
import torch

from hal.transfer import digestcopy
from hicache_ref.storage import integrity
from hicache_ref.storage.base import StorageBackend
from hicache_ref.storage.integrity import DEFAULT_DIGEST, TRAILER_BYTES
from hicache_ref.storage.mooncake_cluster import AUTO, client_with_own_cluster, import_store_module, listeners
from hicache_ref.storage.registry import parse_options
from hicache_ref.storage.staging_buffers import StagingPool

DEFAULT_SEGMENT = 256 << 20
DEFAULT_BUFFER = 64 << 20
NOT_FOUND = -704  # Mooncake's OBJECT_NOT_FOUND
NO_ROOM = -200  # NO_AVAILABLE_HANDLE: every segment full; the master evicts in the background (and
# not objects under a lease: read or written in the last few seconds), so a later put may fit
SPEC_OPTIONS = {"segment": "size", "buffer": "size", "host": "str", "digest": "digest"}


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what}: expected HOST:PORT, got {text!r}")
    return host, int(port)


def _is_loopback_ip(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# What the transfer engine's glog prints on every client's setup and that says nothing wrong: glog's
# own notice that nobody initialised it, and the metadata lookup made before a segment is registered.
_GLOG_NOISE = ("Logging before InitGoogleLogging()", "http=404 body: metadata not found")


@contextlib.contextmanager
def _without_glog_noise():
    """stderr (fd 2, which the C++ library writes) held aside while the body runs; what it got is
    written back after, less the lines of _GLOG_NOISE."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [ln for ln in held.read().decode(errors="replace").splitlines(keepends=True)
                    if not any(n in ln for n in _GLOG_NOISE)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


def load_store_class(spec: str):
    """MooncakeDistributedStore, or RuntimeError naming the spec when the wheel or its libraries are
    missing (imported quietly: mooncake_cluster.import_store_module)."""
    try:
        store_class = import_store_module().MooncakeDistributedStore
    except (ImportError, OSError) as e:
        raise RuntimeError(f"storage spec {spec!r}: the Mooncake wheel is not usable here ({e}); "
                           "pip install 'hicache-harness[mooncake]' and apt-get install libibverbs1 libnuma1") from None
    return store_class


class MooncakeStorage(StorageBackend):
    name = "mooncake"
    persistent = False  # objects live in the writers' mounted segments
    # 0: a batch in one call, sealed and verified on the calling thread (no overlap); N: in two
    # calls, see _spans. 0 measured faster on the 2-core bench machine (an extra master round trip
    # and two thread handoffs a batch, and no idle core to overlap on): BENCHMARKS.md, bench l3.
    overlap_split = 0
    # A get of an object whose replica lies in this client's own segment (every object of a
    # one-client cluster, or one placed on this node) copies it from there itself: one pass moves
    # the payload into the pool and digests it (hal.transfer.digestcopy), where the client's get
    # copies it and the check then reads it again. False: every get goes through the client.
    local_reads = True

    def __init__(self, metadata_url: str, master_addr: str, *, segment: int = DEFAULT_SEGMENT,
                 buffer: int = DEFAULT_BUFFER, host: str = "127.0.0.1", digest: str = DEFAULT_DIGEST,
                 spec: str | None = None, cluster=None):
        spec = spec or f"mooncake:{metadata_url},{master_addr}"
        url = urlparse(metadata_url) if isinstance(metadata_url, str) else None
        if url is None or url.scheme != "http" or not url.hostname or not url.port:
            raise ValueError(f"storage spec {spec!r}: METADATA_URL: expected http://HOST:PORT/metadata, "
                             f"got {metadata_url!r}")
        master = _host_port(master_addr, f"storage spec {spec!r}: MASTER_ADDR") if isinstance(master_addr, str) \
            else _host_port(str(master_addr), f"storage spec {spec!r}: MASTER_ADDR")
        for name, value in (("segment", segment), ("buffer", buffer)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"storage spec {spec!r}: {name}: expected a positive size, got {value!r}")
        super().__init__(digest)
        store_class = load_store_class(spec)
        for what, (h, p) in (("METADATA_URL", (url.hostname, url.port)), ("MASTER_ADDR", master)):
            if not _reachable(h, p):
                raise RuntimeError(f"storage spec {spec!r}: {what}: nothing answers at {h}:{p}")
        self.spec, self.metadata_url, self.master_addr = spec, metadata_url, master_addr
        self._cluster = cluster
        self._store = store_class()
        before = set(listeners(os.getpid()))
        with advertising(host) as advertised:
            with _without_glog_noise():
                rc = self._store.setup(host, metadata_url, segment, buffer, "tcp", "", master_addr)
        self.advertised_address = advertised  # where peers reach this client's RPC and data ports
        if rc != 0:
            raise RuntimeError(f"storage spec {spec!r}: Mooncake client setup failed (code {rc}); see its log on stderr")
        self.endpoint = self._store.get_hostname()  # the transport endpoint of this client's segment
        self._complete = import_store_module().ReplicaStatus.COMPLETE
        self.in_place_reads = 0  # objects `_read_digested` read from this client's segment
        self.exposed_listeners = sorted((a, p) for a, p in set(listeners(os.getpid())) - before
                                        if a not in LOOPBACK)
        warn_exposed(self.exposed_listeners)
        self._arena = torch.empty(buffer, dtype=torch.uint8)
        self._arena_np = self._arena.numpy()
        self._registered: list[tuple[int, int]] = []
        self._reg_lock = threading.Lock()
        self._register(self._arena.data_ptr(), buffer)
        self._arena_lock = threading.Lock()
        # the base's gather/staging buffers are registered once and reused: staged pages move with
        # no second copy through the arena
        self.staging = StagingPool(on_new=lambda b: self._register(b.data_ptr(), b.numel()),
                                   on_drop=lambda b: self._unregister(b.data_ptr()))

    @classmethod
    def from_spec(cls, args: str, spec: str) -> MooncakeStorage:
        """Parse the spec and connect; `auto` connects to a loopback cluster of this client's own."""
        parts = [p.strip() for p in args.split(",")]
        if parts[0] == AUTO:
            opts = parse_options([p for p in parts[1:] if p], spec, SPEC_OPTIONS)
            host = opts.get("host", "127.0.0.1")
            if not _is_loopback_ip(host):  # the cluster of its own is a loopback one, its clients too
                raise ValueError(f"storage spec {spec!r}: host: mooncake:auto runs on loopback; expected an "
                                 f"address in 127.0.0.0/8 or ::1, got {host[:80]!r}")
            return client_with_own_cluster(
                lambda c: cls(c.metadata_url, c.master_addr, spec=spec, cluster=c, **opts), spec)
        if len(parts) < 2 or not parts[0] or not parts[1] or "=" in parts[0] or "=" in parts[1]:
            raise ValueError(f"storage spec {spec!r}: expected mooncake:METADATA_URL,MASTER_ADDR[,segment=SIZE]"
                             "[,buffer=SIZE][,host=IP][,digest=NAME] or mooncake:auto")
        opts = parse_options([p for p in parts[2:] if p], spec, SPEC_OPTIONS)
        return cls(parts[0], parts[1], spec=spec, **opts)

    @property
    def cluster(self):
        """The loopback cluster this client started (`mooncake:auto`), else None."""
        return self._cluster

    # ---- registered memory -------------------------------------------------------------
    def _register(self, ptr: int, size: int) -> None:
        with self._reg_lock:
            if any(a <= ptr and ptr + size <= b for a, b in self._registered):
                return
            rc = self._store.register_buffer(ptr, size)
            if rc != 0:
                raise RuntimeError(f"{self.spec}: register_buffer failed (code {rc})")
            self._registered.append((ptr, ptr + size))

    def _unregister(self, ptr: int) -> None:
        with self._reg_lock:
            if any(a == ptr for a, _ in self._registered):
                self._store.unregister_buffer(ptr)
                self._registered = [(a, b) for a, b in self._registered if a != ptr]

    def _register_host_pool(self, host_pool) -> None:
        for buf in host_pool.buffers:
            self._register(buf.data_ptr(), buf.numel() * buf.element_size())

    def _unregister_host_pool(self, host_pool) -> None:
        with self._arena_lock:  # not while a transfer may be using the range
            for buf in host_pool.buffers:
                self._unregister(buf.data_ptr())

    def _batches(self, items):
        """Split items so each batch's unregistered segments fit the arena. Yields (keys, plans), a
        plan per object: its slices' pointers and sizes (a registered segment's rows where they lie,
        the rest in the arena) and the (arena offset, segment) pairs staged there."""
        cap, base = self._arena.numel(), self._arena.data_ptr()
        with self._reg_lock:
            regs = tuple(self._registered)
        keys, plans, used = [], [], 0
        for key, segs in items:
            ptrs, sizes, staged = [], [], []
            for seg in segs:
                rows, cols = seg.shape
                ptr, stride = _address(seg), seg.strides[0]
                end = ptr + (rows - 1) * stride + cols
                if not any(a <= ptr and end <= b for a, b in regs):
                    staged.append((len(ptrs), seg))
                    ptrs.append(0)
                    sizes.append(seg.nbytes)
                elif rows == 1 or stride == cols:
                    ptrs.append(ptr)
                    sizes.append(seg.nbytes)
                else:
                    ptrs += range(ptr, ptr + rows * stride, stride)
                    sizes += [cols] * rows
            need = sum(seg.nbytes for _, seg in staged)
            if need > cap:
                raise RuntimeError(f"{self.spec}: an object needs {need} staging bytes, buffer is {cap}")
            if used + need > cap:
                yield keys, plans
                keys, plans, used = [], [], 0
            places = []
            for i, seg in staged:
                ptrs[i] = base + used
                places.append((used, seg))
                used += seg.nbytes
            keys.append(key)
            plans.append((ptrs, sizes, places))
        if keys:
            yield keys, plans

    def _spans(self, op: str, count: int, page_bytes: int) -> list[tuple[int, int]]:
        # Every put is two master round trips (start, end) and every get one, a fixed cost that
        # smaller calls multiply: a batch goes in two calls, the small one (1/overlap_split) where
        # the digest cannot overlap a transfer (set: the first, sealed before anything moves;
        # get: the last, verified after), the large one overlapping the other's digest.
        if count < 2 or not self.overlap_split:
            return [(0, count)] if count else []
        small = max(1, count // self.overlap_split)
        cut = small if op == "set" else count - small
        return [(0, cut), (cut, count)]

    # ---- hooks -------------------------------------------------------------------------
    def _exists(self, keys) -> int:
        found = self._store.batch_is_exist(keys)
        for i, code in enumerate(found):
            if code == 1:
                continue
            if code == 0:
                return i
            raise RuntimeError(f"{self.spec}: batch_is_exist failed (code {code})")
        return len(keys)

    def _contains(self, key: str) -> bool:
        return self._exists([key]) == 1

    def _present(self, keys) -> list[bool]:
        codes = self._store.batch_is_exist(keys)
        if any(code not in (0, 1) for code in codes):
            raise RuntimeError(f"{self.spec}: batch_is_exist failed (codes {sorted(set(codes))})")
        return [code == 1 for code in codes]

    def _write(self, items) -> list[bool]:
        out = []
        arena = self._arena_np
        with self._arena_lock:
            for keys, plans in self._batches(items):
                for _, _, places in plans:
                    for at, seg in places:
                        arena[at : at + seg.nbytes].reshape(seg.shape)[...] = seg
                codes = self._store.batch_put_from_multi_buffers(keys, [p for p, _, _ in plans], [n for _, n, _ in plans])
                out.extend(True if code == 0 else None if code == NO_ROOM else False for code in codes)
        return out

    def _read(self, items) -> list[int | None]:
        out = []
        arena = self._arena_np
        with self._arena_lock:
            for keys, plans in self._batches(items):
                codes = self._store.batch_get_into_multi_buffers(keys, [p for p, _, _ in plans], [n for _, n, _ in plans])
                for key, (_, _, places), code in zip(keys, plans, codes, strict=True):
                    if code >= 0:
                        for at, seg in places:
                            seg[...] = arena[at : at + seg.nbytes].reshape(seg.shape)
                        out.append(code)
                    elif code == NOT_FOUND:
                        out.append(-1)
                    else:  # a size that does not fit the page is corrupt, anything else an error
                        size = self._store.get_size(key)
                        out.append(size if size >= 0 else None)
        return out

    def _read_digested(self, items) -> list[tuple[int | None, bytes | None]]:
        if not self.local_reads or not items:
            return super()._read_digested(items)
        try:  # the query takes the read lease a get takes: the master refuses to evict or remove
            # (unforced) the object while it holds, which covers this copy as it covers the client's
            descs = self._store.batch_get_replica_desc([key for key, _ in items])
        except Exception:  # noqa: BLE001 - an older wheel or a failed query: the client's get
            return super()._read_digested(items)
        out: list = [None] * len(items)
        remote, fused, plain = [], [], []
        for i, (key, segs) in enumerate(items):
            at = self._local_replica(descs.get(key))
            if at is None:  # elsewhere, absent or not complete: the client says which
                remote.append(i)
                continue
            addr, size = at
            self.in_place_reads += 1
            if size != sum(seg.nbytes for seg in segs):  # the base calls it corrupt
                out[i] = (size, None)
                continue
            tail = segs[-1]
            ctypes.memmove(tail.ctypes.data, addr + size - TRAILER_BYTES, TRAILER_BYTES)
            dst, lens = digestcopy.row_segments(segs[:-1])
            src = np.uint64(addr) + np.cumsum(lens, dtype=np.uint64) - lens
            (fused if integrity.fuses(tail.reshape(-1)) else plain).append((i, key, src, dst, lens, size))
        for (i, *_, size), digest in zip(fused, integrity.copy_digest([f[1:5] for f in fused]), strict=True):
            out[i] = (size, digest)
        for i, _, src, dst, lens, size in plain:  # a trailer naming another digest: the base checks
            for s_, d_, n_ in zip(src.tolist(), dst.tolist(), lens.tolist(), strict=True):
                ctypes.memmove(d_, s_, n_)
            out[i] = (size, None)
        if remote:
            for i, size in zip(remote, self._read([items[i] for i in remote]), strict=True):
                out[i] = (size, None)
        return out

    def _local_replica(self, replicas) -> tuple[int, int] | None:
        """(address, size) of a complete in-memory replica in this client's segment, else None."""
        for rep in replicas or ():
            if rep.is_memory_replica() and rep.status == self._complete:
                where = rep.get_memory_descriptor().buffer_descriptor
                if where.transport_endpoint == self.endpoint:
                    return where.buffer_address, where.size
        return None

    def _discard(self, key: str) -> None:
        self._store.remove(key, True)

    def _close(self) -> None:
        try:
            self.staging.clear()
            for ptr, _ in list(self._registered):
                self._store.unregister_buffer(ptr)
            self._store.close()
        finally:
            self._registered = []
            if self._cluster is not None:
                self._cluster.stop()


LOOPBACK = ("127.0.0.1", "::1")
ADVERTISE_ENV = "MC_TCP_BIND_ADDRESS"  # read by the transfer engine's init, during setup
_advertise_lock = threading.Lock()
_warned = False


@contextlib.contextmanager
def advertising(host: str):
    """MC_TCP_BIND_ADDRESS = `host` while one client's setup reads it (a user's own value wins), then
    as it was: it is process-wide, and another client may name another host."""
    with _advertise_lock:
        mine = os.environ.get(ADVERTISE_ENV)
        os.environ[ADVERTISE_ENV] = mine or host
        try:
            yield mine or host
        finally:
            if mine is None:
                os.environ.pop(ADVERTISE_ENV, None)
            else:
                os.environ[ADVERTISE_ENV] = mine


def warn_exposed(exposed: list[tuple[str, int]]) -> None:
    """One stderr line per process naming the listeners the client opened beyond loopback."""
    global _warned
    if exposed and not _warned:
        _warned = True
        ports = ", ".join(f"{a}:{p}" for a, p in exposed)
        print(f"hicache: warning: the Mooncake client listens on {ports} (its transfer engine binds every "
              "interface; the data port serves this client's registered memory): firewall these ports on a "
              "shared host", file=sys.stderr, flush=True)


STORE = MooncakeStorage
