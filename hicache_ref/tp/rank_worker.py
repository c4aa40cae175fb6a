"""One rank of an SPMD run: join the group, open the host pool, run the workload, compare, report.

`run_rank(cfg)` runs in every rank process of a group whose env:// variables are set (by
torchrun, or hicache_ref.tp.launch) and returns every rank's figures (all-gathered, so rank 0
holds them all). `python -m hicache_ref.tp.rank_worker --ops K --seed S [--shared --shared-dir D]
...` is the same run under torchrun: rank 0 prints the JSON report (hicache_ref.tp.report).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from hal.backend import get_backend
from hicache_ref.tp.digest import DecisionLog, SpmdCheck, SpmdDivergence
from hicache_ref.tp.group import Group
from hicache_ref.tp.progress import Progress
from hicache_ref.tp.rank_cache import RankCache, host_pool_bytes
from hicache_ref.tp.report import divergence_report, report
from hicache_ref.tp.shared_pool import open_host_buffer
from hicache_ref.tp.workload import WorkloadConfig, make_ops


def _open_backend(cfg: WorkloadConfig):
    backend = get_backend(cfg.backend, cfg.profile)
    if backend.capabilities().device_type == "cuda" and "LOCAL_RANK" in os.environ:
        # one card per rank on a node; more ranks than cards share them round-robin (over gloo)
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % max(1, torch.cuda.device_count()))
    return backend


def run_ops(cfg: WorkloadConfig, group: Group, backend, buf,
            progress: Progress | None = None) -> tuple[dict, DecisionLog, SpmdCheck, float]:
    """The workload on this rank's cache over the opened host buffer `buf`, compared with the group
    after each op and at the end: (the cache's stats, its decision log, the check, wall seconds)."""
    progress = progress or Progress()
    log = DecisionLog(enabled=cfg.self_check)
    check = SpmdCheck(group, log, cfg.check_every)
    cache = RankCache(cfg, group, backend, buf, log)
    t0 = time.perf_counter()
    try:
        for i, op in enumerate(make_ops(cfg)):
            progress.mark("op", i)
            cache.run(i, op)
            check.after_op(i)
        progress.mark("final check")
        cache.settle()
        check.check()
    finally:
        cache.close()
    return cache.stats(), log, check, time.perf_counter() - t0


def run_rank(cfg: WorkloadConfig, progress: Progress | None = None) -> list[dict]:
    """This rank's part of the run; every rank's figures, by rank. SpmdDivergence on every rank
    when the decisions differ; GroupError when a rank fails, dies or times out. `progress`: where
    this rank is, for a launcher to name a rank that stops moving."""
    progress = progress or Progress()
    backend = _open_backend(cfg)
    group = buf = None
    try:
        progress.mark("rendezvous")
        group = Group(cfg.timeout, backend.capabilities().device_type)
        progress.mark("host pool setup")
        buf, pool = open_host_buffer(group, host_pool_bytes(cfg), shared=cfg.shared, shared_dir=cfg.shared_dir,
                                     backend=backend, faults=cfg.faults)
        stats, log, check, wall = run_ops(cfg, group, backend, buf, progress)
        mine = dict(stats, rank=group.rank, digest=f"{log.digest:016x}", read_digest=f"{log.read_digest:016x}",
                    checks=check.checks, wall_seconds=wall, log_seconds=log.seconds,
                    check_seconds=check.seconds, pool=pool, registered_bytes=buf.report()["registered_bytes"])
        progress.mark("gathering figures")
        return group.all_gather_object(mine)
    finally:
        progress.mark("teardown")
        if buf is not None:
            buf.close()
        backend.close()
        if group is not None:
            group.close()


def main(argv: list[str] | None = None) -> int:
    """torchrun entry point: the run of the arguments; rank 0 prints the report as JSON."""
    p = argparse.ArgumentParser(prog="python -m hicache_ref.tp.rank_worker", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    p.add_argument("--ops", type=int, default=WorkloadConfig.ops)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shared", action="store_true")
    p.add_argument("--shared-dir", default="/dev/shm")
    p.add_argument("--free-list", default="fifo", choices=("fifo", "lifo"))
    p.add_argument("--check-every", type=int, default=WorkloadConfig.check_every)
    p.add_argument("--inject-divergence-at", type=int)
    p.add_argument("--backend", default="emu")
    p.add_argument("--timeout", type=float, default=WorkloadConfig.timeout)
    a = p.parse_args(argv)
    cfg = WorkloadConfig(ops=a.ops, seed=a.seed, free_list=a.free_list, check_every=a.check_every, shared=a.shared,
                         shared_dir=a.shared_dir if a.shared else None, inject_divergence_at=a.inject_divergence_at,
                         backend=a.backend, timeout=a.timeout)
    rank = int(os.environ.get("RANK", "0"))
    try:
        results = run_rank(cfg)
    except SpmdDivergence as e:
        if rank == 0:
            print(json.dumps(divergence_report(cfg, int(os.environ["WORLD_SIZE"]), e), indent=2))
        print(f"hicache: spmd: rank {rank}: {e}", file=sys.stderr)
        return 1
    if rank == 0:
        print(json.dumps(report(cfg, results), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
