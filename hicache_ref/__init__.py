"""Reference HiCache on the HAL: radix tree, pools, controller, write policies and ghost list, trace replay.

- spec: CacheSpec, the one description of a cache (geometry, capacities, policies, backend) that builds it.
- cache: HiCache, the request path wiring tree, pools and controller.
- node, radix, tiers: the tree's nodes and results; match/insert/split; moves between L1 and L2.
- policy, ghost, hashing, allocator: write policies and LRU order; ghost list; page hashes; page free lists.
- pools, controller, controller_state, direction_worker, pool_mover, handles: KV pools and the
  threads that move KV between them (through hal), their shared state, handles and counters.
- synthetic_kv: the deterministic KV a materialized cache writes and checks (through hal).
- sim: the simulator: traces (two ship as package data), replay, pricing, sweeps, the fix ladder, the fit.
"""
