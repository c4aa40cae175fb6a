"""L3 tier of the reference HiCache: prefetch from and write-back to a storage backend.

- `prefetch_policy`: the prefetch policies (best_effort, wait_complete, timeout) and the modeled
  L3 link they decide on, so figures are reproducible bit for bit.
- `tier`: `L3Tier`, what the cache calls between match and load-back (prefetch), after a
  backup (write-back) and before each request (settle); threshold and rate limit.
- `host_nodes`: fetched pages into the radix tree as host-resident nodes.
- `io_threads`: the read and write threads; the scheduler waits on them only with a deadline.
- `guard`: L3 faults counted, with request-counted backoff and retry.
- `attach`: `attach_l3`, an L3Tier for a built HiCache from the spec's storage node.
The storage backends themselves are hicache_ref.storage.
"""

from hicache_ref.l3.attach import attach_l3
from hicache_ref.l3.prefetch_policy import PREFETCH_POLICIES, L3Link, make_prefetch_policy
from hicache_ref.l3.tier import L3Tier

__all__ = ["PREFETCH_POLICIES", "L3Link", "L3Tier", "attach_l3", "make_prefetch_policy"]
