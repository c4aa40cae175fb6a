"""The backend a command is asked for, checked before it runs: the modules that register
out-of-tree backends import, and the name is one the registry knows."""

from __future__ import annotations

import importlib

from conformance.common.errors import CliError, clip


def check_backend(name: str, modules: list[str] = ()) -> None:
    """Import each of `modules` (they register backends), then require `name` to be registered;
    CliError naming --backend-module or --backend otherwise."""
    from hal.backend import available_backends

    for mod in modules:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise CliError("--backend-module", f"cannot import {clip(repr(mod))}: {clip(e, 160)}") from None
    if name not in available_backends():
        raise CliError("--backend", f"unknown backend {clip(repr(name))}; known: {', '.join(available_backends())}")
