"""L3 storage for the reference HiCache: the `StorageBackend` contract and its backends.

- `base`: the contract (exists / get / set / close, stats) and the object format with its
  integrity trailer, checked once here for every backend.
- `keys`: storage keys from the page hash chain plus a model/geometry identity tag.
- `pages`: one host-pool page to and from the canonical byte order (address math from
  `hal.transfer.layouts`), so a page reads back bit-identical into any host layout.
- `registry`: backends by name (built-ins and the `hicache.storage` entry point) and
  `open_storage(spec)`.
- `file`, `memory`, `mooncake`: the backends; `mooncake_cluster`: a loopback Mooncake cluster
  (metadata server + master) for tests, conformance and benchmarks.
"""
