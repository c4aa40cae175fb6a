"""A local TP group for CI and `hicache spmd`: N rank processes meeting over env://, as under torchrun.

Ranks fork from a forkserver that imported torch once, so a group starts fast; the forkserver
dies with the launcher and each rank with the forkserver (parent-death signals), even on SIGKILL. The run is bounded:
once a rank fails, the others get the collective timeout to fail with their reason, and the rest is
killed; a rank whose place (hicache_ref.tp.progress) stays the same for that timeout plus a margin
is killed and reported with that place, so no rank hangs the launcher. Files left by a rank killed
mid-setup are reaped afterwards.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import time
from typing import NamedTuple

from hal import children
from hal.memory import shm
from hicache_ref.tp import progress
from hicache_ref.tp.workload import WorkloadConfig

PRELOAD = ["hicache_ref.tp.forkserver_guard", "torch", "torch.distributed", "hicache_ref.tp.rank_worker"]
MARGIN_SECONDS = 10.0


class RankOutcome(NamedTuple):
    rank: int
    status: str  # "ok", "diverged", "error" or "died" (exited, or killed for standing still, unreported)
    payload: object  # ok: every rank's figures (rank 0) or None; diverged: dict; error/died: message
    exitcode: int | None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, cfg: WorkloadConfig, conn, forkserver: int, cells) -> None:
    # The forkserver (this rank's parent) dies with the launcher (PRELOAD's first module), and
    # this rank dies with the forkserver: a SIGKILLed launcher leaves no rank behind.
    children.die_with_parent(forkserver)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    import torch

    from hicache_ref.tp.digest import SpmdDivergence
    from hicache_ref.tp.rank_worker import run_rank

    torch.set_num_threads(1)  # N ranks share the cores
    try:
        results = run_rank(cfg, progress.Progress(cells, rank))
        conn.send(("ok", results if rank == 0 else None))
    except SpmdDivergence as e:
        conn.send(("diverged", {"op": e.op, "what": e.what, "decisions": e.decisions, "message": str(e)}))
        raise SystemExit(1) from None
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the launcher as one line
        conn.send(("error", " ".join(f"{type(e).__name__}: {e}".split())))
        raise SystemExit(1) from None
    finally:
        conn.close()


def forkserver_pid() -> int:
    """The pid of this process's forkserver (started on first use): the ranks' parent."""
    from multiprocessing import forkserver

    forkserver.ensure_running()
    return forkserver._forkserver._forkserver_pid


def _context():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def launch(cfg: WorkloadConfig, ranks: int, deadline_seconds: float | None = None) -> list[RankOutcome]:
    """Run `cfg` on `ranks` local rank processes; every rank's outcome, by rank."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks: expected a positive number of ranks, got {ranks!r}")
    ctx, port = _context(), free_port()
    cells = progress.new_cells(ctx, ranks)
    pipes, procs = [], []
    try:
        for r in range(ranks):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_rank_main, args=(r, ranks, port, cfg, send, forkserver_pid(), cells),
                            name=f"hicache-rank-{r}", daemon=True)
            p.start()
            send.close()
            pipes.append(recv)
            procs.append(p)
        return _collect(procs, pipes, cells, cfg.timeout, deadline_seconds)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)
        for c in pipes:
            c.close()
        if cfg.shared_dir is not None and os.path.isdir(cfg.shared_dir):
            shm.reap_dead_files(cfg.shared_dir)


def _collect(procs, pipes, cells, timeout: float, deadline_seconds: float | None) -> list[RankOutcome]:
    got: dict[int, tuple[str, object]] = {}
    stuck: dict[int, str] = {}  # ranks killed for standing still, with where they stood
    stall_seconds = timeout + MARGIN_SECONDS
    seen = {r: (progress.row(cells, r), time.monotonic()) for r in range(len(procs))}
    stop_at = None if deadline_seconds is None else time.monotonic() + deadline_seconds
    while True:
        for r, c in enumerate(pipes):
            if r not in got and c.poll():
                try:
                    got[r] = c.recv()
                except EOFError:
                    got[r] = ("died", None)
        now = time.monotonic()
        for r, p in enumerate(procs):
            if r in got or r in stuck or not p.is_alive():
                continue
            if progress.row(cells, r) != seen[r][0]:
                seen[r] = (progress.row(cells, r), now)
            elif now - seen[r][1] > stall_seconds:
                stuck[r] = f"no progress for {stall_seconds:g} s at {progress.where(cells, r)}: killed"
                p.kill()
        alive = [p for p in procs if p.is_alive()]
        failed = bool(stuck) or any(s != "ok" for s, _ in got.values()) or any(
            p.exitcode not in (None, 0) for r, p in enumerate(procs) if r not in got)
        if not alive and all(r in got or not c.poll() for r, c in enumerate(pipes)):
            break
        if failed and stop_at is None:
            stop_at = now + timeout + MARGIN_SECONDS  # the others fail on their own by then
        if stop_at is not None and now > stop_at:
            break
        time.sleep(0.01)
    return [_outcome(r, p, got, stuck, cells) for r, p in enumerate(procs)]


def _outcome(r: int, p, got: dict, stuck: dict, cells) -> RankOutcome:
    if p.is_alive():
        p.kill()
        p.join(5)
        return RankOutcome(r, "error", f"still running at the launcher's deadline at {progress.where(cells, r)}: "
                                       "killed", None)
    p.join()
    if r in stuck and got.get(r, ("died",))[0] == "died":  # killed here, not a report it sent
        return RankOutcome(r, "died", stuck[r], p.exitcode)
    status, payload = got.get(r, ("died", None))
    if status == "died" or payload is None and status != "ok":
        payload = f"exited with {_exit_text(p.exitcode)} before reporting"
        status = "died"
    return RankOutcome(r, status, payload, p.exitcode)


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"code {code}"
