"""`hicache spmd`: the same seeded workload on N TP ranks (real processes), checked for SPMD determinism.

Spawns a local group (hicache_ref.tp.launch: env:// rendezvous, gloo on 127.0.0.1), runs the
workload on every rank through the reference HiCache with real bytes, compares the ranks'
allocator decisions every --check-every ops, and prints the report (hicache_ref.tp.report;
`--json`: its keys). Exit 0: consistent, every read bit-exact; 1: a divergence, a mismatching
read, or a rank that failed or died (one line naming the ranks and why); 2: bad input.
"""

from __future__ import annotations

import json
import sys

from conformance.common import args as types
from hicache_ref.tp.launch import launch
from hicache_ref.tp.report import divergence_report, ok, report
from hicache_ref.tp.spmd_preflight import checked_config
from hicache_ref.tp.workload import WorkloadConfig

HELP = "run a seeded workload on N TP ranks (processes) and check that they allocate alike (SPMD determinism)"
MAX_RANKS = 64
MAX_OPS = 1_000_000
DEFAULTS = WorkloadConfig()


def add_arguments(p) -> None:
    p.add_argument("--tp", type=types.count(1, MAX_RANKS), default=2, help="TP ranks (processes) to spawn")
    p.add_argument("--ops", type=types.count(1, MAX_OPS), default=DEFAULTS.ops, help="workload operations per rank")
    p.add_argument("--seed", type=types.count(0), default=0, help="workload seed")
    p.add_argument("--shared-host", action="store_true", help="one TP-shared host pool (rank 0 writes, all read)")
    p.add_argument("--shared-dir", default="/dev/shm", help="directory of the shared pool's file (with --shared-host)")
    p.add_argument("--free-list", default=DEFAULTS.free_list, choices=("fifo", "lifo"),
                   help="order in which freed pages are reused")
    p.add_argument("--check-every", type=types.count(1), default=DEFAULTS.check_every,
                   help="compare the ranks' decision digests every K ops (and at the end)")
    p.add_argument("--inject-divergence-at", type=types.count(0), metavar="I",
                   help="perturb the last rank's allocator at op I (the check must catch it)")
    p.add_argument("--timeout", type=types.count(1, 3600), default=int(DEFAULTS.timeout),
                   help="seconds any collective may wait before the ranks give up")
    p.add_argument("--backend", default=DEFAULTS.backend, help="backend every rank runs on (emu; cuda or xpu on "
                   "hardware, one card per local rank)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")


def config_from_args(a) -> WorkloadConfig:
    """The run the command line describes, refused (naming the option) where it cannot run here."""
    return checked_config(a.tp, ops=a.ops, seed=a.seed, free_list=a.free_list, check_every=a.check_every,
                          shared=a.shared_host, shared_dir=a.shared_dir if a.shared_host else None,
                          inject_divergence_at=a.inject_divergence_at, timeout=float(a.timeout), backend=a.backend)


def failure_line(outcomes) -> str:
    """One line for a run some rank did not finish: every failing rank and its reason."""
    bad = [o for o in outcomes if o.status not in ("ok", "diverged")]
    died = [o for o in bad if o.status == "died"]
    first = died or bad
    return "; ".join(f"rank {o.rank}: {o.payload}" for o in first + [o for o in bad if o not in first])


def run(a) -> int:
    cfg = config_from_args(a)
    outcomes = launch(cfg, a.tp)
    diverged = [o for o in outcomes if o.status == "diverged"]
    if all(o.status == "ok" for o in outcomes):
        rep = report(cfg, outcomes[0].payload)
    elif diverged and all(o.status in ("diverged", "ok") for o in outcomes):
        d = diverged[0].payload
        rep = divergence_report(cfg, a.tp, _Divergence(d))
    else:
        print(f"hicache: spmd: {failure_line(outcomes)}", file=sys.stderr, flush=True)
        return 1
    if a.json:
        print(json.dumps(rep, indent=2))
    else:
        print("\n".join(summary_lines(rep)))
    if not ok(rep):
        fd = rep["first_divergence"]
        why = (f"{fd['what']} differ first at op {fd['op']}" if fd else
               f"{rep['read_mismatches']} pages read back wrong" if rep["read_mismatches"] else "ranks read different KV")
        print(f"hicache: spmd: {why}", file=sys.stderr, flush=True)
        return 1
    return 0


class _Divergence:
    """A divergence as the ranks sent it back (hicache_ref.tp.digest.SpmdDivergence's fields)."""

    def __init__(self, d: dict):
        self.op, self.what, self.decisions = d["op"], d["what"], d["decisions"]


def summary_lines(rep: dict) -> list[str]:
    head = (f"{rep['ranks']} ranks, {rep['ops']} ops, seed {rep['seed']}, free list {rep['free_list']}, "
            f"{'shared' if rep['shared'] else 'private'} host pool")
    fd = rep["first_divergence"]
    if fd is not None:
        return [head, f"DIVERGED: {fd['what']} differ first at op {fd['op']}"] + [
            f"  rank {r}: {d}" for r, d in fd["decisions"].items()]
    d2h = ", ".join(f"{r}: {b:,}" for r, b in rep["d2h_bytes_by_rank"].items())
    return [head,
            f"{'consistent' if rep['consistent'] else 'INCONSISTENT'}: digest {rep['digest']} "
            f"({rep['checks']} checks, every {rep['check_every']} ops)",
            f"host KV bytes {rep['host_bytes_total']:,}; D2H bytes by rank {{{d2h}}}",
            f"pages read back wrong: {rep['read_mismatches']}; reads identical across ranks: {rep['reads_identical']}"]




