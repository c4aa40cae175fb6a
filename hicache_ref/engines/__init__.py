"""Replay engines: `reference` (hicache_ref's own cache) and `sglang` (SGLang's, on the HAL).

`ENGINES` names them; `replay_with(engine, spec, trace, limit)` runs one and returns the same
figures (same keys) either way. An engine that cannot run here raises EngineNotRun. Each engine
declares every spec field honoured or refused (`support_table`: hicache_ref.engines.reference_support,
hicache_ref.engines.sglang.support); `refusal` says which option of a spec an engine does not run; `engine_for` gives the ladder and the readings an Engine
(they report a state it does not run as not run).
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


def support_table(engine: str) -> dict:
    """`engine`'s declaration of every spec field: {path: Honoured | Refused} (spec.engine_support)."""
    if engine not in ENGINES:
        raise ValueError(f"engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if engine == "reference":
        from hicache_ref.engines.reference_support import SUPPORT
    else:
        from hicache_ref.engines.sglang.support import SUPPORT
    return SUPPORT


def refusal(engine: str, spec) -> str | None:
    """Why `engine` does not replay `spec` (the option it does not run, named first); None when it
    does. Asked before any work, so a caller can report that run as not run and go on."""
    from hicache_ref.spec.engine_support import first_refusal

    return first_refusal(engine, support_table(engine), spec)


class Engine:
    """Another engine as hicache_ref.sim.ladder.scenario.Runs takes it (sim imports no engine): why a
    spec is not run on it (`not_run`, a NOT RUN line), and its replay."""

    def __init__(self, name: str):
        self.name, self.absent = name, not_run_reason(name)

    def not_run(self, spec) -> str | None:
        if self.absent is not None:
            return f"NOT RUN: engine {self.name}: {self.absent}"
        why = refusal(self.name, spec)
        return None if why is None else f"NOT RUN on engine {self.name}: {why}"

    def replay(self, spec, requests) -> dict:
        """The engine's figures for `spec`, not priced: Runs prices them against its own HiCache-off run."""
        return replay_with(self.name, spec, requests, off=False)


def engine_for(name: str) -> Engine | None:
    """None for the reference (the ladder's own replays), else the Engine named."""
    return None if name == DEFAULT_ENGINE else Engine(name)


def replay_with(engine: str, spec, trace, limit: int | None = None, off: bool | None = None) -> dict:
    """Replay on `engine`: the reference's run_replay, or SGLang's cache; priced against HiCache
    off (hicache_ref.sim.run.baseline), or not at all with `off` False. An option the engine does not
    run is a ValueError naming it (before the engine is looked for: bad input first);
    EngineNotRun when the engine is absent."""
    if (refused := refusal(engine, spec)) is not None:
        raise ValueError(refused)
    why = not_run_reason(engine)
    if why is not None:
        raise EngineNotRun(f"engine {engine}: {why}")
    if engine == "reference":
        from hicache_ref.sim.run.replay_dispatch import run_replay

        return run_replay(spec, trace, limit, off=off)
    from hicache_ref.engines.sglang.engine_replay import replay_sglang
    from hicache_ref.spec.capacity_check import check_capacity

    check_capacity(spec)
    if spec.tp.ranks is None:
        fig = replay_sglang(spec, trace, limit, off=off)
    else:  # one rank stands for the group, as the reference's TP replay (engines.sglang.engine_replay says why)
        from hicache_ref.sim.run.tp_replay import tp_group_figures

        fig = tp_group_figures(spec, replay_sglang(spec.tp_rank(), trace, limit, off=off))
    if spec.host_sizing is not None:
        fig["host_sizing"] = spec.host_sizing
    return fig
