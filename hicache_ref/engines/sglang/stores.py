"""The store upstream's own backend attaches to on the sglang engine: what it is, what it wrote.

`file:DIR` is HiCacheFile in DIR. `mooncake:METADATA_URL,MASTER_ADDR[,segment=SIZE][,host=IP]` is
upstream's MooncakeStore, a client of that cluster; `mooncake:auto[,...]` starts a loopback cluster
for the run (hicache_ref.storage.mooncake_cluster) and stops it at close. Either store holds
upstream's keys and bytes, the ones `--l3-keys sglang` reads and writes, so either engine serves
the other's store. A store gives the server arguments that make upstream's `init_hicache` attach
it, and counts the pages upstream wrote (upstream skips a page already stored).
"""

from __future__ import annotations

import contextlib
import json
import os
from urllib.parse import urlparse

from hal.memory.budget import refuse_over
from hicache_ref.storage.mooncake import DEFAULT_SEGMENT, LOOPBACK, advertising, warn_exposed
from hicache_ref.storage.mooncake_cluster import AUTO, Unavailable, listeners, start_loopback
from hicache_ref.storage.registry import parse_options, split_spec

MOONCAKE_OPTIONS = {"segment": "size", "host": "str"}  # the reference spec's that upstream has a setting for


class UpstreamStore:
    """One store for one run: `open_store`, then `server_fields` for the server, `attaching` around
    `init_hicache`, `attach(cache)` after it, `detach()` after the cache's shutdown, `close()`."""

    backend = ""  # upstream's hicache_storage_backend

    def __init__(self, storage):
        self.storage = storage

    def server_fields(self) -> dict:
        """ServerArgs fields that attach this store (the threshold goes in the extra config)."""
        extra = {"prefetch_threshold": self.storage.prefetch_threshold, **self._extra_config()}
        return dict(hicache_storage_backend=self.backend, hicache_storage_backend_extra_config=json.dumps(extra),
                    served_model_name=self.storage.l3_model or "", **self._fields())

    def attaching(self):
        """A context for upstream's `init_hicache`, while it connects to the store."""
        return contextlib.nullcontext()

    def attach(self, cache) -> None:
        """After `init_hicache`: upstream's backend is cache.cache_controller.storage_backend."""

    def written(self) -> int:
        """Pages upstream wrote to the store since it opened."""
        raise NotImplementedError

    def detach(self) -> None:
        """After the cache's shutdown (its storage threads stopped): release upstream's client."""

    def close(self) -> None:
        """Release what the run started (idempotent)."""

    def _fields(self) -> dict:
        return {}

    def _extra_config(self) -> dict:
        return {}


class FileStore(UpstreamStore):
    backend = "file"

    def __init__(self, storage):
        super().__init__(storage)
        self.path = os.path.abspath(split_spec(storage.l3)[1].strip())
        self._before = stored_objects(self.path)

    def written(self) -> int:
        return stored_objects(self.path) - self._before

    def _fields(self) -> dict:
        return dict(file_storage_path=self.path)


def stored_objects(path: str) -> int:
    """HiCacheFile's objects in `path` (0 before upstream made the directory): files, no symlinks."""
    try:
        with os.scandir(path) as entries:
            return sum(1 for e in entries if e.name.endswith(".bin") and e.is_file(follow_symlinks=False))
    except FileNotFoundError:
        return 0


def mooncake_parts(spec: str) -> tuple[tuple[str, str] | None, dict]:
    """(metadata URL, master address) or None for `auto`, and the options of a mooncake spec;
    ValueError naming --l3 for what upstream's MooncakeStore has no setting for."""
    parts = [p.strip() for p in split_spec(spec)[1].split(",")]
    addresses = None
    if parts[0] != AUTO:
        if len(parts) < 2 or not parts[0] or not parts[1] or "=" in parts[0] or "=" in parts[1]:
            raise ValueError(f"--l3: {spec}: expected mooncake:METADATA_URL,MASTER_ADDR[,segment=SIZE][,host=IP] "
                             "or mooncake:auto[,segment=SIZE]")
        url = urlparse(parts[0])
        if url.scheme != "http" or not url.hostname or not url.port:
            raise ValueError(f"--l3: {spec}: METADATA_URL: expected http://HOST:PORT/metadata, got {parts[0]!r}")
        addresses = (parts[0], parts[1])
    rest = [p for p in parts[1 if addresses is None else 2:] if p]
    for item in rest:
        key = item.partition("=")[0].strip()
        if key in ("buffer", "digest"):
            raise ValueError(f"--l3: {spec}: {key}: not a setting of upstream's MooncakeStore "
                             "(its own transfer buffer, no digest)")
    try:
        return addresses, parse_options(rest, spec, MOONCAKE_OPTIONS)
    except ValueError as e:
        raise ValueError(f"--l3: {e}") from None


class _CountingClient:
    """Upstream's Mooncake client with the keys its puts stored counted (the proxy is the seam:
    upstream puts only the keys it found missing; a page is its `_k` object, MHA's `_v` rides along)."""

    def __init__(self, client):
        self._client, self.pages = client, 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def _count(self, keys, results):
        self.pages += sum(1 for k, rc in zip(keys, results, strict=True) if rc == 0 and k.endswith("_k"))
        return results

    def batch_put_from(self, keys, *args):
        return self._count(keys, self._client.batch_put_from(keys, *args))

    def batch_put_from_multi_buffers(self, keys, *args):
        return self._count(keys, self._client.batch_put_from_multi_buffers(keys, *args))


class MooncakeStore(UpstreamStore):
    backend = "mooncake"

    def __init__(self, storage):
        super().__init__(storage)
        addresses, opts = mooncake_parts(storage.l3)
        self.segment = opts.get("segment", DEFAULT_SEGMENT)
        refuse_over("--l3", self.segment, "the segment upstream's Mooncake client mounts")
        self.cluster, self._client = None, None
        if addresses is None:
            try:
                self.cluster = start_loopback()
            except Unavailable as e:
                raise RuntimeError(f"--l3: {storage.l3}: {e.reason}") from None
            addresses = (self.cluster.metadata_url, self.cluster.master_addr)
        self.metadata_url, self.master_addr = addresses
        self.host = opts.get("host", LOOPBACK[0])
        self.exposed_listeners: list[tuple[str, int]] = []

    @contextlib.contextmanager
    def attaching(self):
        before = set(listeners(os.getpid()))
        with advertising(self.host):  # the transfer engine's address is read during its setup
            yield
        self.exposed_listeners = sorted((a, p) for a, p in set(listeners(os.getpid())) - before
                                        if a not in LOOPBACK)
        warn_exposed(self.exposed_listeners)

    def attach(self, cache) -> None:
        backend = cache.cache_controller.storage_backend
        self._client = _CountingClient(backend.store)
        backend.store = self._client

    def written(self) -> int:
        return self._client.pages if self._client is not None else 0

    def detach(self) -> None:
        # upstream's own close leaves its client to the garbage collector; its segment must be
        # unmounted while the master still runs
        if self._client is not None:
            self._client._client.close()

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    def _extra_config(self) -> dict:
        extra = dict(master_server_address=self.master_addr, metadata_server=self.metadata_url, protocol="tcp",
                     global_segment_size=self.segment, local_hostname=self.host, check_server=False)
        if self.storage.l3_tag:  # the tenant tag before the model in upstream's keys
            extra["extra_backend_tag"] = self.storage.l3_tag
        return extra


STORES = {"file": FileStore, "mooncake": MooncakeStore}


def open_store(storage) -> UpstreamStore | None:
    """The store of `storage` (a StorageSpec; refuse_unsupported has passed), or None without an L3."""
    if storage.l3 is None:
        return None
    return STORES[split_spec(storage.l3)[0]](storage)
