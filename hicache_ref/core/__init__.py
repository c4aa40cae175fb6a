"""The cache core: radix tree, tiers, pools, allocator, write policies and the controller that moves KV through hal."""
