"""Replay worker processes (the sweep's tiers, the ladder's states): one replay per task, each
worker a fresh interpreter, over pipes.

Plain child processes (hal.children), not multiprocessing: no semaphores in /dev/shm and no
resource tracker to outlive a killed parent. Each worker is in its own process group and dies
with the parent (SIGKILL included); on Ctrl-C or SIGTERM the parent kills them before the
interrupt goes on, so no worker prints a traceback. Frames are pickles on the worker's stdin and
stdout: the requests (and whether replays are served) once, then one spec per task, one result
(or the exception) per task.
"""

from __future__ import annotations

import json
import os
import pickle
import selectors
import sys
from collections.abc import Callable

from hal import children

# The worker's interpreter sees the parent's sys.path, as multiprocessing's spawn arranges.
_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from hicache_ref.sim.run.replay_workers import worker_main; worker_main()")


def worker_main() -> None:
    """A worker: read the requests, then replay each spec it is sent until its stdin closes."""
    from hicache_ref.sim.run.serial_replay import replay
    from hicache_ref.sim.run.served_replay import replay_served

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    requests, served = pickle.load(stdin)
    run = replay_served if served else replay
    while True:
        try:
            spec = pickle.load(stdin)
        except EOFError:
            return
        try:
            frame = ("ok", run(spec, requests, off=False))  # the caller prices each against its own HiCache-off run
        except Exception as e:  # noqa: BLE001 - the parent raises it as the sequential sweep would
            frame = ("error", e)
        try:
            blob = pickle.dumps(frame)
        except Exception as e:  # noqa: BLE001 - an exception that does not pickle goes back as its text
            blob = pickle.dumps(("error", RuntimeError(f"{type(e).__name__}: {e}")))
        stdout.write(blob)
        stdout.flush()


def worker_count(asked: int | None, tasks: int) -> int:
    """Worker processes for `tasks` replays: `asked` (None: one per core), never more than the
    tasks, at least 1 (1: the caller replays in process)."""
    return max(1, min(asked or os.cpu_count() or 1, tasks))


def replay_in_workers(specs: list, requests: list, workers: int, tick: Callable[[], None],
                      served: bool = False) -> list[dict]:
    """`replay(spec, requests, off=False)` (`served`: `replay_served`) for every spec on `workers`
    processes (not priced: the caller prices against its HiCache-off run); results in `specs` order."""
    procs = []
    try:
        for _ in range(workers):  # all started first: they import in parallel
            procs.append(children.start([sys.executable, "-c", _BOOT, json.dumps(sys.path)], stdin=-1, stdout=-1))
        blob = pickle.dumps((requests, served))
        for proc in procs:
            proc.stdin.write(blob)
            proc.stdin.flush()
        return _dispatch(procs, specs, tick)
    finally:
        for proc in procs:
            children.kill_now(proc)  # done or interrupted: nothing left to save in a worker
            proc.stdin.close()
            proc.stdout.close()


def _dispatch(procs, specs: list, tick: Callable[[], None]) -> list[dict]:
    out: list = [None] * len(specs)
    todo = list(enumerate(specs))
    busy = {}  # worker -> index of the spec it replays
    sel = selectors.DefaultSelector()
    for proc in procs:
        sel.register(proc.stdout, selectors.EVENT_READ, proc)
    try:
        def send(proc) -> None:
            i, spec = todo.pop(0)
            busy[proc] = i
            proc.stdin.write(pickle.dumps(spec))
            proc.stdin.flush()

        for proc in procs[:len(todo)]:
            send(proc)
        while busy:
            for key, _ in sel.select():
                proc = key.data
                try:
                    status, value = pickle.load(proc.stdout)
                except EOFError:
                    raise RuntimeError(f"replay worker {proc.pid} died (exit {proc.wait()})") from None
                if status == "error":
                    raise value
                out[busy.pop(proc)] = value
                tick()
                if todo:
                    send(proc)
        return out
    finally:
        sel.close()
