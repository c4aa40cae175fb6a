"""L3 storage for the reference HiCache: the `StorageBackend` contract and its backends.

- `base`: the contract (exists / get / set / register_host_pool / close, the hooks a backend fills);
  `batch_args` checks a batch's keys and pages, `client_stats` holds what a client counts.
- `harness_io`: pages as the harness's objects, integrity checked there once for every backend
  (the trailer and digests of `integrity`), the digest of one chunk overlapped with the transfer of
  the next on the client's `digest_worker`; `staging_buffers`: staging for pages not moved in place.
- `keys`: storage keys from the page hash chain (plus a model/geometry identity tag in the
  harness's scheme) and upstream's namespace seed of the chain.
- `objects`, `upstream_io`: the key schemes' object formats, and pages as upstream SGLang's objects.
- `pages`: one host-pool page to and from the canonical byte order (address math from
  `hal.transfer.layouts`), so a page reads back bit-identical into any host layout.
- `registry`: backends by name (built-ins: the modules here that name their class `STORE`; the
  `hicache.storage` entry point) and `open_storage(spec)`.
- `file`, `memory`, `model`, `mooncake`: the backends (`file_folder`: the folder a file store owns); `mooncake_cluster`: a loopback Mooncake cluster
  (metadata server + master) for tests, conformance and benchmarks.
"""
