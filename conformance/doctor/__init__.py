"""`hicache doctor`: host-side preflight checks and the advice drawn from them.

`checks` (run_doctor: every check in order), the checks by area: `stack_preflight` (the device
software stack), `topology_checks` (PCIe ordering, NUMA placement), `huge_pages` (THP, page
tables), `host_memory` (do the pools fit), `pinned_memory` (memlock, registered size); `advice`
(binding, pool size, write policy), `records` (Check, HostPaths, sizes), `doctor_report` (JSON, table).
"""
