"""What a local SPMD run is refused for before any rank starts: a backend that is unknown, not
available here or moves no bytes, a divergence injected past the last op or into a single rank,
and a shared pool directory that cannot take the pool's file. Errors name the `hicache spmd`
option (`--tp`, `--backend`, ...), so the command prints them as they are."""

from __future__ import annotations

from hicache_ref.tp.workload import WorkloadConfig


def checked_config(ranks: int, **fields) -> WorkloadConfig:
    """The WorkloadConfig of `fields` for `ranks` ranks once it can run here, its shared_dir
    resolved; ValueError naming the option otherwise (checked before the config is built, so
    the option is named rather than the field)."""
    ops = fields.get("ops", WorkloadConfig.ops)
    i = fields.get("inject_divergence_at")
    if i is not None and i >= ops:
        raise ValueError(f"--inject-divergence-at: op {i} is past the last op ({ops - 1}) of --ops {ops}")
    if i is not None and ranks < 2:
        raise ValueError("--inject-divergence-at: needs --tp 2 or more (one rank cannot diverge)")
    _check_backend(fields.get("backend", WorkloadConfig.backend))
    if fields.get("shared"):
        from hal.memory import shm

        try:
            fields["shared_dir"] = shm.validate_dir(fields.get("shared_dir"), 1)
        except ValueError as e:
            raise ValueError(f"--shared-dir: {str(e).removeprefix('shared_dir: ')}") from None
    return WorkloadConfig(**fields)


def _check_backend(name: str) -> None:
    from hal.backend import available_backends, backend_class, get_backend

    if name not in available_backends():
        raise ValueError(f"--backend: unknown backend {name!r}; known: {', '.join(available_backends())}")
    ok_here, why = backend_class(name).probe()
    if not ok_here:
        raise ValueError(f"--backend: {name} is not available here: {why}")
    probe = get_backend(name)
    try:
        if not probe.capabilities().moves_bytes:
            raise ValueError(f"--backend: {name} moves no bytes; the SPMD run writes and checks real KV")
    finally:
        probe.close()
