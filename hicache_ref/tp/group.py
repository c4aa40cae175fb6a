"""A TP group of real processes under torch.distributed, with every collective bounded in time.

Rendezvous is env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), what torchrun sets, so the
same code runs as `torchrun --nproc-per-node 8 -m hicache_ref.tp.rank_worker ...` on a node and
under hicache_ref.tp.launch for CI. A loopback MASTER_ADDR gets a store made here: rank 0's
TCPStore listens on a socket bound to 127.0.0.1 (torch's own would listen on every interface);
under torchrun, whose agent serves the store, the ranks connect to that one. The process-group backend follows the device: nccl where
the ranks' device is CUDA, gloo otherwise (emu and CI, on 127.0.0.1). The group's timeout
bounds every collective: a dead or stuck rank makes the others raise `GroupError` (naming
the collective) instead of hanging.

The tensors of the last collectives stay referenced here until close() has destroyed the process
group: a gloo worker thread can still hold a finished collective's work when its wait returns,
and where Python dropped the work's tensors first, freeing them takes the GIL, which
destroy_process_group holds while it joins those threads (torch 2.5.1 deadlocks there). The
object collectives are built on byte tensors for the same reason: torch's drop theirs.
"""

from __future__ import annotations

import datetime
import os
import pickle
from collections import deque

import torch
import torch.distributed as dist

from hicache_ref.tp.store import is_loopback, loopback_store

DEFAULT_TIMEOUT_SECONDS = 30.0
HELD_COLLECTIVES = 64  # a worker thread lets go of a work before it takes the next one
INT64_MAX = (1 << 63) - 1


class GroupError(RuntimeError):
    """A collective failed: a rank died, timed out or reported a failure."""


def process_group_backend(device_type: str, local_ranks: int = 1) -> str:
    """nccl for CUDA-like devices (torch_xmlir presents the XPU as cuda) when every local rank has
    a card of its own (nccl refuses two ranks on one device), gloo otherwise and for CPU ones."""
    if device_type != "cuda" or not dist.is_nccl_available():
        return "gloo"
    return "nccl" if torch.cuda.device_count() >= local_ranks else "gloo"


class Group:
    """This process's rank in a group made from the env:// variables; close() leaves it."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT_SECONDS, device_type: str = "cpu"):
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if k not in os.environ]
        if missing:
            raise ValueError(f"env: {', '.join(missing)} not set (run under torchrun or hicache_ref.tp.launch)")
        if not timeout > 0:
            raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
        self.timeout = float(timeout)
        self._held: deque = deque(maxlen=HELD_COLLECTIVES)  # each collective's tensors (module docstring)
        self.backend = process_group_backend(device_type, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else None
        try:
            timeout = datetime.timedelta(seconds=self.timeout)
            agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # torchrun serves it
            if is_loopback(os.environ["MASTER_ADDR"]) and not agent_store:
                dist.init_process_group(self.backend, store=loopback_store(timeout), timeout=timeout,
                                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
            else:  # another host's address: torchrun's rendezvous, as it is
                dist.init_process_group(self.backend, init_method="env://", timeout=timeout)
        except Exception as e:  # noqa: BLE001 - any rendezvous failure is this one error
            raise GroupError(f"rendezvous at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} failed "
                             f"within {self.timeout:g} s: {_short(e)}") from None
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def _run(self, what: str, fn):
        try:
            return fn()
        except GroupError:
            raise
        except Exception as e:  # noqa: BLE001
            raise GroupError(f"rank {self.rank}: collective {what} failed (a rank died, or none answered within "
                             f"{self.timeout:g} s): {_short(e)}") from None

    def _hold(self, *tensors):
        self._held.append(tensors)
        return tensors

    def _tensor(self, values, dtype=torch.int64) -> torch.Tensor:
        t = torch.tensor(list(values), dtype=dtype)
        return t.to(self.device) if self.device is not None else t

    def all_reduce(self, values, op: str) -> list[int]:
        """Element-wise min or max of int64 `values` over the ranks."""
        (t,) = self._hold(self._tensor(values))
        red = {"min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op]
        self._run(f"all_reduce({op})", lambda: dist.all_reduce(t, op=red))
        return [int(x) for x in t.cpu().tolist()]

    def _gather(self, t: torch.Tensor, what: str) -> list[torch.Tensor]:
        out = [torch.empty_like(t) for _ in range(self.world)]
        self._hold(t, *out)
        self._run(what, lambda: dist.all_gather(out, t))
        return out

    def all_gather(self, values) -> list[list[int]]:
        """Every rank's int64 `values` (same length on every rank), by rank."""
        return [[int(x) for x in o.cpu().tolist()] for o in self._gather(self._tensor(values), "all_gather")]

    def all_gather_object(self, obj) -> list:
        """Every rank's picklable `obj`, by rank."""
        data = pickle.dumps(obj)
        sizes = [int(o[0]) for o in self._gather(self._tensor([len(data)]), "all_gather_object")]
        out = self._gather(self._bytes(data, max(sizes)), "all_gather_object")
        return [pickle.loads(o[:n].cpu().numpy().tobytes()) for o, n in zip(out, sizes, strict=True)]

    def broadcast_object(self, obj, src: int = 0):
        """Rank `src`'s `obj` on every rank."""
        data = pickle.dumps(obj) if self.rank == src else b""
        (size,) = self._hold(self._tensor([len(data)]))
        self._run("broadcast_object", lambda: dist.broadcast(size, src=src))
        (buf,) = self._hold(self._bytes(data, int(size.cpu()[0])))
        self._run("broadcast_object", lambda: dist.broadcast(buf, src=src))
        return pickle.loads(buf.cpu().numpy().tobytes())

    def _bytes(self, data: bytes, n: int) -> torch.Tensor:
        """`data` in a uint8 tensor of `n` >= len(data) bytes, zero-padded, on the group's device."""
        t = torch.zeros(n, dtype=torch.uint8)
        if data:
            t[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return t.to(self.device) if self.device is not None else t

    def agree(self, error: str | None, what: str) -> None:
        """Collective success: every rank says whether its part of `what` failed; if any did,
        every rank raises GroupError with every failing rank's reason."""
        errors = self.all_gather_object(error)
        bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
        if bad:
            raise GroupError(f"{what} failed: " + "; ".join(bad))

    def close(self) -> None:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            self._held.clear()


def _short(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
