"""A local TP group for CI and `hicache spmd`: N rank processes meeting over env://, as under torchrun.

Ranks fork from a forkserver that imported torch once, so a group starts fast. The run is bounded:
once a rank fails, the others get the collective timeout to fail with their reason, and the rest is
killed. Files left by a rank killed mid-setup are reaped afterwards.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import threading
import time
from typing import NamedTuple

from hal.memory import shm
from hicache_ref.tp.workload import WorkloadConfig

PRELOAD = ["torch", "torch.distributed", "hicache_ref.tp.worker"]
MARGIN_SECONDS = 10.0


class RankOutcome(NamedTuple):
    rank: int
    status: str  # "ok", "diverged", "error" or "died"
    payload: object  # ok: every rank's figures (rank 0) or None; diverged: dict; error/died: message
    exitcode: int | None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WATCH_SECONDS = 0.5


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[19]
    except OSError:
        return None


def _die_with(launcher: int, started: str | None) -> None:
    """SIGKILL this rank once the launcher is gone (the same pid with another start time is
    another process). A rank's parent is the forkserver, which outlives a killed launcher
    while ranks run, so PR_SET_PDEATHSIG would not fire: the rank watches the launcher itself."""
    def watch():
        while _start_time(launcher) == started:
            time.sleep(WATCH_SECONDS)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="hicache-rank-watchdog", daemon=True).start()


def _rank_main(rank: int, world: int, port: int, cfg: WorkloadConfig, conn, launcher: tuple) -> None:
    _die_with(*launcher)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    import torch

    from hicache_ref.tp.digest import SpmdDivergence
    from hicache_ref.tp.worker import run_rank

    torch.set_num_threads(1)  # N ranks share the cores
    try:
        results = run_rank(cfg)
        conn.send(("ok", results if rank == 0 else None))
    except SpmdDivergence as e:
        conn.send(("diverged", {"op": e.op, "what": e.what, "decisions": e.decisions, "message": str(e)}))
        raise SystemExit(1) from None
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the launcher as one line
        conn.send(("error", " ".join(f"{type(e).__name__}: {e}".split())))
        raise SystemExit(1) from None
    finally:
        conn.close()


def _context():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def launch(cfg: WorkloadConfig, ranks: int, deadline_seconds: float | None = None) -> list[RankOutcome]:
    """Run `cfg` on `ranks` local rank processes; every rank's outcome, by rank."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks: expected a positive number of ranks, got {ranks!r}")
    ctx, port = _context(), free_port()
    launcher = (os.getpid(), _start_time(os.getpid()))
    pipes, procs = [], []
    try:
        for r in range(ranks):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_rank_main, args=(r, ranks, port, cfg, send, launcher), name=f"hicache-rank-{r}", daemon=True)
            p.start()
            send.close()
            pipes.append(recv)
            procs.append(p)
        return _collect(procs, pipes, cfg.timeout, deadline_seconds)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)
        for c in pipes:
            c.close()
        if cfg.shared_dir is not None and os.path.isdir(cfg.shared_dir):
            shm.reap_dead_files(cfg.shared_dir)


def _collect(procs, pipes, timeout: float, deadline_seconds: float | None) -> list[RankOutcome]:
    got: dict[int, tuple[str, object]] = {}
    stop_at = None if deadline_seconds is None else time.monotonic() + deadline_seconds
    while True:
        for r, c in enumerate(pipes):
            if r not in got and c.poll():
                try:
                    got[r] = c.recv()
                except EOFError:
                    got[r] = ("died", None)
        alive = [p for p in procs if p.is_alive()]
        failed = any(s != "ok" for s, _ in got.values()) or any(
            p.exitcode not in (None, 0) for r, p in enumerate(procs) if r not in got)
        if not alive and all(r in got or not c.poll() for r, c in enumerate(pipes)):
            break
        if failed and stop_at is None:
            stop_at = time.monotonic() + timeout + MARGIN_SECONDS  # the others fail on their own by then
        if stop_at is not None and time.monotonic() > stop_at:
            break
        time.sleep(0.01)
    out = []
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            p.join(5)
            out.append(RankOutcome(r, "error", "still running at the launcher's deadline: killed", None))
            continue
        p.join()
        status, payload = got.get(r, ("died", None))
        if status == "died" or payload is None and status != "ok":
            payload = f"exited with {_exit_text(p.exitcode)} before reporting"
            status = "died"
        out.append(RankOutcome(r, status, payload, p.exitcode))
    return out


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"code {code}"
