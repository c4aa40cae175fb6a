"""Transfer: how KV bytes move between a device pool and a host pool.

`layouts` (host layouts and their byte-address math, the one place it lives), `plan` (indices ->
merged segments; the planner), `layer_plans` (layer-0 plans standing for whole transfers),
`kvcacheio` + `kvcheck` (sgl-kernel's op set and its argument checks), `pool_ops` (which op moves a
pool in a given layout), `segcopy` + `rows` (the CPU copy engine), `seed` (the P800 seed geometry and transfer, defined
once), `direction` (the Direction type: d2h, h2d, d2d, h2h).
"""
