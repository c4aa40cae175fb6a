"""Replay engines by name: each is a module of this folder (or a package's __init__) naming its
class `ENGINE` (hicache_ref.engines.base.ReplayEngine), found from the source text, imported only
when used; adding the file adds `--engine NAME`. `base` is the contract (ReplayEngine); built in:
`reference` (hicache_ref's own cache; its table of spec fields in `reference_support`) and `sglang/`
(SGLang's installed HiCache on the HAL; its table in `sglang/support`).

`replay_with(engine, spec, trace, limit)` runs one and returns the same figures (same keys) on
every engine; an option the engine refuses is a ValueError naming it, an engine that cannot run
here raises EngineNotRun. `engine_for` gives the ladder and the readings a LadderEngine (they
report a state it does not run as not run).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from hal.common.named_registry import modules_defining

_BUILTIN = modules_defining("hicache_ref.engines", Path(__file__).parent, "ENGINE")
ENGINES = tuple(_BUILTIN)
DEFAULT_ENGINE = "reference"


class EngineNotRun(RuntimeError):
    """The engine cannot run on this machine (the message says why)."""


def _import_failure(engine: str) -> str | None:
    """Why the module of `engine` does not import here (a vendor library it imports at its top
    level is missing), or None when it imports."""
    module = _BUILTIN[engine].partition(":")[0]
    try:
        importlib.import_module(module)
    except ImportError as e:
        return f"its module {module} does not import here: {type(e).__name__}: {e}"
    return None


def engine_class(engine: str):
    """The ReplayEngine class called `engine`; ValueError naming the known ones when none is,
    EngineNotRun when its module does not import here."""
    if engine not in _BUILTIN:
        raise ValueError(f"engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if (why := _import_failure(engine)) is not None:
        raise EngineNotRun(f"engine {engine}: {why}")
    module, _, attr = _BUILTIN[engine].partition(":")
    return getattr(importlib.import_module(module), attr)


def not_run_reason(engine: str) -> str | None:
    """Why `engine` cannot run here (its module does not import, or the engine says); None when it can."""
    if engine in _BUILTIN and (why := _import_failure(engine)) is not None:
        return why
    return engine_class(engine).unavailable_reason()


def support_table(engine: str) -> dict:
    """`engine`'s declaration of every spec field: {path: Honoured | Refused} (spec.engine_support)."""
    return engine_class(engine).support()


def refusal(engine: str, spec) -> str | None:
    """Why `engine` does not replay `spec` (the option it does not run, named first); None when it
    does. Asked before any work, so a caller can report that run as not run and go on."""
    from hicache_ref.spec.engine_support import first_refusal

    return first_refusal(engine, support_table(engine), spec)


def replay_with(engine: str, spec, trace, limit: int | None = None, off: bool | None = None) -> dict:
    """Replay on `engine`, priced against HiCache off (hicache_ref.sim.run.baseline), or not at all
    with `off` False. A refused option is a ValueError naming it (before the engine is looked
    for: bad input first, unless the engine's module does not import, so has no table); EngineNotRun
    when the engine is absent."""
    if _import_failure(engine) is None and (refused := refusal(engine, spec)) is not None:
        raise ValueError(refused)
    why = not_run_reason(engine)
    if why is not None:
        raise EngineNotRun(f"engine {engine}: {why}")
    return engine_class(engine).replay(spec, trace, limit, off)


class LadderEngine:
    """An engine other than the reference as hicache_ref.sim.ladder.scenario.Runs takes it (sim
    imports no engine): why a spec is not run on it (`not_run`, a NOT RUN line), and its replay."""

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


def engine_for(name: str) -> LadderEngine | None:
    """None for the reference (the ladder's own replays), else the LadderEngine named."""
    return None if name == DEFAULT_ENGINE else LadderEngine(name)
