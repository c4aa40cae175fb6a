"""The loopback Mooncake cluster: the one place `mooncake:auto`, the tests, conformance and benchmarks start one.

`start_loopback` starts a cluster; `client_with_own_cluster` is what `mooncake:auto` opens.
`resolve_auto` turns `mooncake:auto[,opts]` into the spec of a client of a fresh cluster.
Its metadata server and master listen on 127.0.0.1 only; `listeners(pid)` lets a test check that.
Processes, ports, logs and restarts: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TypeVar

from hal import children

LOOPBACK = "127.0.0.1"
START_ATTEMPTS = 3
AUTO = "auto"  # `mooncake:auto[,opts]`: a loopback cluster of the client's own
T = TypeVar("T")


class Unavailable(RuntimeError):
    """The Mooncake wheel cannot run here; `reason` says why (raised before anything starts)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"mooncake cluster: {reason}")


def binaries() -> tuple[list[str], list[str]] | None:
    """(metadata server argv prefix, master argv prefix), or None when the Mooncake wheel is absent."""
    spec = importlib.util.find_spec("mooncake")
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = list(spec.submodule_search_locations)[0]
    master = shutil.which("mooncake_master") or os.path.join(pkg, "mooncake_master")
    if not os.access(master, os.X_OK):
        return None
    meta = shutil.which("mooncake_http_metadata_server")
    return ([meta] if meta else [sys.executable, "-m", "mooncake.http_metadata_server"]), [master]


def import_store_module():
    """Import `mooncake.store` (ImportError/OSError when the wheel or its libraries are missing).

    The library logs every INFO line of a client's setup to stderr (some 17 per client); unless the
    user set MC_LOG_LEVEL it is told to log errors only, before it loads (it reads the variable
    then). One ERROR line remains on a client's first setup ("metadata not found": the lookup
    before its segment is registered), which is harmless."""
    os.environ.setdefault("MC_LOG_LEVEL", "ERROR")
    import mooncake.store

    return mooncake.store


def unavailable_reason() -> str | None:
    """Why a loopback cluster cannot start here, or None when it can."""
    if binaries() is None:
        return ("the Mooncake wheel is not installed (pip install 'hicache-harness[mooncake]'; "
                "apt-get install libibverbs1 libnuma1)")
    try:
        import_store_module()  # loads libibverbs/libnuma
    except (ImportError, OSError) as e:
        return f"the Mooncake wheel does not load: {e} (apt-get install libibverbs1 libnuma1)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _accepting(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((LOOPBACK, port)) == 0


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    out.add(target[8:-1])
    return out


def _hex_addr(text: str) -> str:
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def listeners(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process `pid` listens on, from /proc/net/tcp and tcp6."""
    inodes = _socket_inodes(pid)
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                    addr, port = cols[1].split(":")
                    out.append((_hex_addr(addr), int(port, 16)))
    return sorted(out)


def group_pids(pgid: int) -> list[int]:
    """Live processes of process group `pgid` (a shim may exec or fork: look at the whole group)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = open(f"/proc/{name}/stat").read()
                if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
                    out.append(int(name))
    return out


class MooncakeCluster:
    """Metadata server + master on loopback. `start()`, `stop()`, `restart_master()`; a context manager."""

    def __init__(self, log_dir: str | None = None, ready_timeout: float = 30.0):
        if not isinstance(ready_timeout, int | float) or ready_timeout <= 0:
            raise ValueError(f"ready_timeout: expected positive seconds, got {ready_timeout!r}")
        self._own_log_dir = log_dir is None  # a temporary folder of ours: removed at stop
        self._keep_logs = False  # set once a server failed to come up: its logs are the evidence
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="hicache-mooncake-")
        os.makedirs(self.log_dir, mode=0o700, exist_ok=True)
        self.ready_timeout = float(ready_timeout)
        self.metadata_port = self.rpc_port = self.metrics_port = 0
        self.metadata: subprocess.Popen | None = None
        self.master: subprocess.Popen | None = None
        self._master_starts = 0

    # ---- addresses ---------------------------------------------------------------------
    @property
    def metadata_url(self) -> str:
        return f"http://{LOOPBACK}:{self.metadata_port}/metadata"

    @property
    def master_addr(self) -> str:
        return f"{LOOPBACK}:{self.rpc_port}"

    @property
    def spec(self) -> str:
        """The storage spec of a client of this cluster: `mooncake:METADATA_URL,MASTER_ADDR`."""
        return f"mooncake:{self.metadata_url},{self.master_addr}"

    def pids(self) -> list[int]:
        return [pid for p in (self.metadata, self.master) if p is not None and p.poll() is None
                for pid in group_pids(p.pid)]

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> MooncakeCluster:
        """Start both servers (Unavailable when the wheel cannot run here, RuntimeError with the
        logs' tail when a server does not come up)."""
        why = unavailable_reason()
        if why:
            raise Unavailable(why)
        os.makedirs(self.log_dir, mode=0o700, exist_ok=True)  # again after a stop that removed it
        for attempt in range(START_ATTEMPTS):
            try:
                self._start_metadata()
                self.rpc_port, self.metrics_port = free_port(), free_port()
                self.start_master()
                return self
            except RuntimeError:
                self.stop()
                if attempt == START_ATTEMPTS - 1:
                    raise
        return self

    def _log(self, name: str):
        path = os.path.join(self.log_dir, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        return os.fdopen(fd, "ab")

    def _spawn(self, argv: list[str], log: str, port: int) -> subprocess.Popen:
        with self._log(log) as out:
            out.write(f"--- {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
            out.flush()
            # its own group, SIGKILLed by the kernel when the thread that started it dies: a killed or
            # interrupted owner leaves no cluster (start clusters from a thread that outlives them)
            proc = children.start(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.ready_timeout
        while not _accepting(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(proc)
                self._keep_logs = True
                raise RuntimeError(f"mooncake cluster: {os.path.basename(argv[-1] if argv[0] == sys.executable else argv[0])} "
                                   f"did not come up on {LOOPBACK}:{port}; log {os.path.join(self.log_dir, log)}:\n"
                                   + self.log_tail(log))
            time.sleep(0.05)
        return proc

    def _start_metadata(self) -> None:
        meta, _ = binaries()
        self.metadata_port = free_port()
        self.metadata = self._spawn([*meta, "--host", LOOPBACK, "--port", str(self.metadata_port),
                                     "--log-level", "WARNING"], "metadata.log", self.metadata_port)

    def start_master(self) -> None:
        """Start the master on its ports (after `stop_master`, the same ports: clients reconnect)."""
        _, master = binaries()
        self._master_starts += 1
        self.master = self._spawn([*master, "-rpc_port", str(self.rpc_port), "-rpc_address", LOOPBACK,
                                   "-metrics_host", LOOPBACK, "-metrics_port", str(self.metrics_port),
                                   "-enable_http_metadata_server=false"], "master.log", self.rpc_port)

    def stop_master(self) -> None:
        _stop(self.master)
        self.master = None

    def restart_master(self) -> None:
        """Kill the master (SIGKILL: a crash, not a clean shutdown) and start it again on the same ports."""
        _stop(self.master, sig=signal.SIGKILL)
        self.master = None
        self.start_master()

    def stop(self) -> None:
        """Stop both process groups (SIGTERM, then SIGKILL after 5 s); idempotent. A log folder
        given by the caller stays; our own temporary one goes unless a start failed."""
        _stop(self.master)
        _stop(self.metadata)
        self.master = self.metadata = None
        if self._own_log_dir and not self._keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def log_tail(self, name: str | None = None, lines: int = 40) -> str:
        """The last `lines` of one log, or of both."""
        out = []
        for log in [name] if name else ["metadata.log", "master.log"]:
            with contextlib.suppress(OSError), open(os.path.join(self.log_dir, log), errors="replace") as f:
                out.append(f"== {log}\n" + "".join(f.readlines()[-lines:]))
        return "\n".join(out)

    def __enter__(self) -> MooncakeCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def start_loopback(log_dir: str | None = None) -> MooncakeCluster:
    """A started loopback cluster (its logs in `log_dir`, else a temporary folder removed at stop)."""
    return MooncakeCluster(log_dir=log_dir).start()


def auto_options(spec: str) -> list[str] | None:
    """The options after `auto` of a `mooncake:auto[,opt...]` spec (maybe none), else None."""
    name, _, args = str(spec).strip().partition(":")
    parts = [p.strip() for p in args.split(",")]
    if name.strip() != "mooncake" or parts[0] != AUTO:
        return None
    return [p for p in parts[1:] if p]


def client_with_own_cluster(connect: Callable[[MooncakeCluster], T], spec: str) -> T:
    """`connect(cluster)` on a freshly started loopback cluster: what `mooncake:auto` opens. The
    client owns the cluster (stops it at close); a failed connect stops it here. RuntimeError
    naming `spec` when the wheel cannot run here."""
    try:
        cluster = start_loopback()
    except Unavailable as e:
        raise RuntimeError(f"storage spec {spec!r}: {e.reason}") from None
    try:
        return connect(cluster)
    except BaseException:
        cluster.stop()
        raise


def resolve_auto(spec: str) -> tuple[str, MooncakeCluster | None]:
    """`mooncake:auto[,opts]`: (the spec of a client of a freshly started loopback cluster, opts
    kept; that cluster, which the caller stops). Any other spec: (spec, None). Unavailable when
    the wheel cannot run here."""
    opts = auto_options(spec)
    if opts is None:
        return spec, None
    cluster = start_loopback()
    return ",".join([cluster.spec, *opts]), cluster


def _stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM) -> None:
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # the group may hold children of the leader (a shim): none may outlive the cluster
    for pid in group_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
