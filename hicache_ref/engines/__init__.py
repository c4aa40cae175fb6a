"""Replay engines: `reference` (hicache_ref's own cache) and `sglang` (SGLang's, on the HAL).

`ENGINES` names them; `replay_with(engine, spec, trace, limit)` runs one and returns the same
figures (same keys) either way. An engine that cannot run here raises EngineNotRun; `refusal`
says which spec an engine does not run (the ladder reports those rungs as not run).
"""

from __future__ import annotations

ENGINES = ("reference", "sglang")
DEFAULT_ENGINE = "reference"


class EngineNotRun(RuntimeError):
    """The engine cannot run on this machine (the message says why)."""


def not_run_reason(engine: str) -> str | None:
    """Why `engine` cannot run here; None when it can."""
    if engine not in ENGINES:
        raise ValueError(f"engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if engine == "reference":
        return None
    from hicache_ref.engines.sglang import unavailable_reason

    return unavailable_reason()


def refusal(engine: str, spec) -> str | None:
    """Why `engine` does not replay `spec` (the option it does not run, named first); None when it
    does. Asked before any work, so a caller can report that run as not run and go on."""
    if engine == "reference":
        return None
    from hicache_ref.engines.sglang.replay import refuse_unsupported

    try:
        refuse_unsupported(spec)
    except ValueError as e:
        return str(e)
    return None


def replay_with(engine: str, spec, trace, limit: int | None = None) -> dict:
    """Replay on `engine`: the reference's run_replay, or SGLang's cache (EngineNotRun when absent)."""
    why = not_run_reason(engine)
    if why is not None:
        raise EngineNotRun(f"engine {engine}: {why}")
    if engine == "reference":
        from hicache_ref.sim.run import run_replay

        return run_replay(spec, trace, limit)
    from hicache_ref.engines.sglang.replay import replay_sglang
    from hicache_ref.spec.memory import check_capacity

    check_capacity(spec)
    fig = replay_sglang(spec, trace, limit)
    if spec.host_sizing is not None:
        fig["host_sizing"] = spec.host_sizing
    return fig
