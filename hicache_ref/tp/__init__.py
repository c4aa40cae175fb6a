"""TP ranks of the reference HiCache: one host KV copy per TP group, and the SPMD self-check.

`group` (torch.distributed over env://, gloo on 127.0.0.1 or the device's backend, collectives
with timeouts), `launch` (a local group of rank processes for CI, torchrun-compatible env),
`shared_pool` (rank 0 creates the O_EXCL 0600 host segment, the others attach, then it is
unlinked; every rank registers it), `visibility` (no rank loads a page before rank 0's D2H of
it completed, nor does rank 0 overwrite a page another rank still reads), `digest` (a 64-bit
digest of allocator decisions compared across ranks), `workload` (the seeded random workload),
`rank_cache` (one rank's tree, pools and controller under the writer rule), `worker` (one rank's
run; `python -m hicache_ref.tp.worker` under torchrun).
"""
