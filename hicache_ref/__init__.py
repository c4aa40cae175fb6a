"""Reference HiCache on the HAL, and what drives it; one subpackage per concept.

- `spec/`: CacheSpec, the one description of a cache (geometry, tiers, semantics, storage,
  serving, TP, profile) that checks every option once and builds the cache.
- `core/`: the cache itself: radix tree, tiers, pools, allocator, write policies and LRU order,
  ghost list, the controller that moves KV through hal, and the request path (`core/cache.py`).
- `l3/`, `storage/`: the L3 tier (prefetch, write-back) and the stores behind one contract.
- `tp/`: TP ranks in real processes, one host copy per TP group, the SPMD self-check.
- `models/`: served models: KV bytes per token, weights per rank, prefill FLOPs.
- `sim/`: the simulator: traces (two ship as package data), pricing, replay, sweeps, the fix
  ladder, the model against readings.
- `engines/`: what replays a trace: the reference cache or SGLang's own HiCache.
- `advise/`: `hicache advise`: whether to turn HiCache on, with which flags.
"""
