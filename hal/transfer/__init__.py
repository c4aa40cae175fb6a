"""Transfer: how KV bytes move between a device pool and a host pool.

`layouts/` (one module per host layout: shape, address math, op pair, segment rule; looked up
by name in `layout_registry`), `geometry` (KVGeometry and the device pool's address math), `slots`
(slot indices for planned transfers), `plan` (indices -> merged segments; the planner), `layer_plans` (layer-0 plans standing
for whole transfers), `kvcacheio` + `kvcheck` (sgl-kernel's op set and its argument checks),
`pool_ops` (a pool moved through its layout's op pair), `io_backend` (kernel vs direct),
`segcopy` + `rows` (the CPU copy engine), `digestcopy` (its fused copy + XXH3 digest: one pass over
memory), `pattern` (the native writer of stand-in KV bytes), `seed` (the P800 seed geometry and transfer, defined
once), `direction` (the Direction type: d2h, h2d, d2d, h2h).
"""
