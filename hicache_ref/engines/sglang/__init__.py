"""The sglang engine: SGLang's installed HiCache (UnifiedRadixCache, its tree core, its
cache controller and host pools, unmodified) replaying traces on the HAL.

The seam is the device layer only: kernel_shim (sgl_kernel.kvcacheio from hal.transfer),
pool_memory (host buffers from hal.memory, device buffers from the backend), tally (what moved).
`unavailable_reason()` says why the engine cannot run here (None when it can); `SGLangEngine`
is the engine as hicache_ref.engines picks it.
"""

from __future__ import annotations

from hicache_ref.engines.base import ReplayEngine

SGLANG_VERSION = "0.5.23"  # the release this engine and the sglang-0.5.23 preset are pinned to
# The reference preset the differential suite compares against (one name, bumped with the pin).
SEMANTICS_PRESET = "sglang-0.5.23"


def unavailable_reason() -> str | None:
    """None when SGLang's HiCache imports at the pinned version; otherwise why not (one line)."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("sglang")
        except PackageNotFoundError:
            return f"sglang is not installed (ci/install-sglang.sh installs sglang=={SGLANG_VERSION})"
        if found != SGLANG_VERSION:
            return f"sglang {found} is installed; this engine is pinned to {SGLANG_VERSION} (ci/install-sglang.sh)"
        from hicache_ref.engines.sglang.noise import quiet_import

        with quiet_import():
            import sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller  # noqa: F401
            import sglang.srt.mem_cache.unified_radix_cache  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure is the reason the engine cannot run
        return f"sglang {SGLANG_VERSION} does not import here: {type(e).__name__}: {e}"
    return None


class SGLangEngine(ReplayEngine):
    @classmethod
    def unavailable_reason(cls) -> str | None:
        return unavailable_reason()

    @classmethod
    def support(cls) -> dict:
        from hicache_ref.engines.sglang.support import SUPPORT

        return SUPPORT

    @classmethod
    def replay(cls, spec, trace, limit: int | None, off: bool | None) -> dict:
        from hicache_ref.engines.sglang.engine_replay import replay_sglang
        from hicache_ref.spec.capacity_check import check_capacity

        check_capacity(spec)
        if spec.tp.ranks is None:
            fig = replay_sglang(spec, trace, limit, off=off)
        else:  # one rank stands for the group, as the reference's TP replay (engine_replay says why)
            from hicache_ref.sim.run.tp_replay import tp_group_figures

            fig = tp_group_figures(spec, replay_sglang(spec.tp_rank(), trace, limit, off=off))
        if spec.host_sizing is not None:
            fig["host_sizing"] = spec.host_sizing
        return fig


ENGINE = SGLangEngine
