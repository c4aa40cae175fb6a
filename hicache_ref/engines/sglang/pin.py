"""The SGLang release the sglang engine is pinned to, and whether it imports here."""

from __future__ import annotations

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
