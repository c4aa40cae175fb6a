"""The cache core: radix tree, tiers, pools, allocator, write policies and the controller that moves KV through hal.

`cache` (HiCache, the request path) and `prefill` (one prefill's steps on the tree); the tree:
`radix`, `node`, `page_keys`, `block_tokens`, `hashing` (the page hash chain), `tiers` (moves between
L1 and L2), `policy` (write policies, hit counting, eviction order), `ghost` (recently evicted pages);
the memory: `pools`, `allocator`, `synthetic_kv` (what "compute" writes, checked on hits); the
controller: `controller`, `controller_state`, `direction_worker`, `handles`, `pool_mover` (its jobs as
hal plans and pool ops).
"""
