"""TP ranks of the reference HiCache: one host KV copy per TP group, and the SPMD self-check.

The process group with bounded collectives, a local launcher, the shared host pool, the visibility
gate, the decision digest, the seeded workload, one rank's cache and its worker. `hicache replay --tp`
is the simulator's (hicache_ref.sim.run.tp_replay).
"""
