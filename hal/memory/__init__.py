"""Host memory: KV host buffers and how they are made ready for DMA.

`host` (allocate_host, attach_host: 2 MiB-aligned mmap, THP before first touch, NUMA policy,
pre-fault and collapse, shared files), `host_buffer` (HostBuffer: release and measured report),
`registration` (chunked registration with rollback, written once; backends supply the per-range
hook), `vm` (mmap/madvise/smaps), `shm` (O_EXCL 0600
shared files, unlinked once attached), `numa` (set_mempolicy/mbind/move_pages), `budget` (what the
machine can give a run, refused before allocating), `cpu_device` (CPU buffers standing for device
memory, told apart by address until freed).
"""
