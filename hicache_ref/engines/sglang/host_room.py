"""The host memory SGLang lets its host pool take, asked before anything is built.

Upstream refuses a host pool larger than the host memory it sees (psutil's available, bounded by
the cgroup's headroom) less a reserve it keeps for everything else (HICACHE_HOST_MEMORY_RESERVE_BYTES,
10 GiB in 0.5.23), split among the host's ranks; refused there, it logs a traceback and raises.
`host_pool_refusal` asks upstream's own rule first, so the refusal is one line naming what to
change: `--l2-tokens` when a smaller pool would fit, else the memory the run is given.
`quiet_pool_failure` keeps upstream's logged traceback out of a failure this engine reports itself.
"""

from __future__ import annotations

import contextlib
import logging

from hal.memory.budget import fmt

# Upstream's words for a pool it will not allocate, and the allocator's for memory not given.
_POOL_FAILURES = ("Not enough host memory", "can't allocate memory", "Cannot allocate memory", "out of memory")


def host_pool_refusal(l2_tokens: int, token_bytes: int, page_size: int) -> str | None:
    """Why upstream will not allocate a host pool of `l2_tokens` rows of `token_bytes`, as one
    `--option: ...` line; None when its rule lets it."""
    from sglang.srt.mem_cache.pool_host import base

    need = l2_tokens * token_bytes
    room = base.host_memory_budget_bytes()  # upstream's: available, less its reserve, per rank
    if need <= room:
        return None
    reserve = base.HICACHE_HOST_MEMORY_RESERVE_BYTES
    said = (f"SGLang's host pool of {l2_tokens:,} tokens needs {fmt(need)}, and SGLang keeps {fmt(reserve)} "
            f"of host memory free besides its pools; it sees {fmt(max(room + reserve, 0))} available "
            "(MemAvailable, or the cgroup's room when less)")
    fits = max(room, 0) // token_bytes // page_size * page_size - page_size  # less upstream's padding page
    if fits >= page_size:
        return f"--l2-tokens: {said}; give at most {fits:,}, or the run {fmt(need - room)} more memory"
    return (f"--engine: sglang: {said}; give the run at least {fmt(need - room)} more memory (e.g. a higher "
            "cgroup memory limit), or use --engine reference")


def refuse_host_pool(l2_tokens: int, token_bytes: int, page_size: int) -> None:
    """ValueError with host_pool_refusal's line, when there is one."""
    if (why := host_pool_refusal(l2_tokens, token_bytes, page_size)) is not None:
        raise ValueError(why)


def is_pool_failure(error: BaseException) -> bool:
    """Whether `error` is an allocation of upstream's pools failing for want of memory."""
    return isinstance(error, MemoryError) or (isinstance(error, (ValueError, RuntimeError, OSError))
                                              and any(w in str(error) for w in _POOL_FAILURES))


class _Held(logging.Filter):
    """Holds the records a logger is given (returns False: none is emitted while held)."""

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record):
        self.records.append(record)
        return False


@contextlib.contextmanager
def quiet_pool_failure():
    """Around upstream's pool building: the assembler's log records are held; dropped when the
    block fails for want of memory (the caller reports it in one line), else given back to the logger."""
    from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler

    log = hybrid_pool_assembler.logger
    held = _Held()
    log.addFilter(held)
    failed = None
    try:
        yield
    except BaseException as e:
        failed = e
        raise
    finally:
        log.removeFilter(held)
        if failed is None or not is_pool_failure(failed):
            for record in held.records:
                log.handle(record)
