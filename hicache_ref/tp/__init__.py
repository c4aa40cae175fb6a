"""TP ranks of the reference HiCache: one host KV copy per TP group, and the SPMD self-check.

The process group with bounded collectives (`group`, its loopback `store`), a local launcher
(`launch`, `forkserver_guard`, `progress`, `spmd_preflight`), the shared host pool (`shared_pool`), the
visibility gate (`visibility`), the decision digest (`digest`), the seeded workload (`workload`), one
rank's cache and its worker (`rank_cache`, `rank_worker`) and the run's report (`report`). `hicache replay --tp`
is the simulator's (hicache_ref.sim.run.tp_replay).
"""
