"""`hicache conform`: the conformance suites against one backend and profile, through pytest.

Runs `pytest --pyargs conformance` (the installed package: no source checkout needed) in a
child process, writes OUT/junit.xml and OUT/summary.json, and prints a per-module table.
Exit status: pytest's (0 all passed or skipped, 1 some test failed, 5 nothing matched -k);
2 for a bad argument (unknown backend or profile). A backend whose hardware is absent is not
an error: every test that needs it is skipped with the backend's reason, and the run exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

HELP = "run the conformance suites (layout equivalence, bad input, targets) on a backend and profile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="emu", help="emu (default), cuda, xpu or a registered backend")
    p.add_argument("--profile", default=None,
                   help="hardware profile name or YAML path (default: emu for emu, p800 for xpu, "
                        "else one named like the backend if it ships)")
    p.add_argument("--out", default=None, help="report folder (default: ./hicache-conform-BACKEND-PROFILE)")
    p.add_argument("-k", dest="keyword", default=None, help="only tests matching this pytest -k expression")
    p.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failure")
    p.add_argument("-n", "--workers", default="auto",
                   help="pytest-xdist workers: 'auto' (one per core, when there is more than one core "
                        "and xdist is installed), a number, or 0 for one process")
    p.add_argument("--backend-module", action="append", default=[],
                   help="import this module first: it registers an out-of-tree backend (repeatable)")
    p.add_argument("pytest_args", nargs="*", help="further pytest arguments, after --")


def _check_backend(name: str, modules: list[str]) -> None:
    from hal.backend import available_backends

    for mod in modules:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise ValueError(f"--backend-module: cannot import {mod!r}: {e}") from e
    if name not in available_backends():
        raise ValueError(f"--backend: unknown backend {name!r}; known: {', '.join(available_backends())}")


def _profile_name(backend: str, profile: str | None) -> str | None:
    from conformance.plugin import default_profile_name
    from hardware_profiles import load_profile

    if profile is None:
        return default_profile_name(backend)
    load_profile(profile)  # a ProfileError (a ValueError) names the file and what was expected
    return profile


def _workers(value: str) -> list[str]:
    if value in ("0", "1") or importlib.util.find_spec("xdist") is None:
        return []
    if value == "auto":
        return ["-n", "auto"] if (os.cpu_count() or 1) > 1 else []
    if not value.isdigit():
        raise ValueError(f"--workers: {value!r} is not 'auto' or a number")
    return ["-n", value]


def pytest_command(a, profile: str | None, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance", "-p", "conformance.plugin",
           # An empty ini in OUT: the caller's own pytest config (addopts, testpaths) stays out.
           "-c", str(out / "pytest.ini"), "--rootdir", str(out), "-p", "no:cacheprovider",
           "-p", "no:benchmark",  # pytest-benchmark, where installed, only warns under xdist
           "--backend", a.backend, "--junitxml", str(out / "junit.xml"), "-q", "--tb=short"]
    if profile:
        cmd += ["--profile", profile]
    for mod in a.backend_module:
        cmd += ["--backend-module", mod]
    if a.keyword:
        cmd += ["-k", a.keyword]
    if a.exitfirst:
        cmd.append("-x")
    return cmd + _workers(a.workers) + list(a.pytest_args)


def run(a) -> int:
    from conformance.plugin import backend_status
    from conformance.report import summary as report

    _check_backend(a.backend, a.backend_module)
    profile = _profile_name(a.backend, a.profile)
    if profile and ("/" in profile or profile.endswith((".yaml", ".yml"))):
        profile = str(Path(profile).resolve())  # the child runs in OUT
    out = Path(a.out or f"hicache-conform-{a.backend}-{Path(profile).stem if profile else 'noprofile'}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    junit = out / "junit.xml"
    junit.unlink(missing_ok=True)  # never summarize a previous run's file

    ok, why = backend_status(a.backend)
    if not ok:
        print(f"hicache conform: backend {a.backend!r} is not available here: {why}\n"
              f"  every test that needs it is skipped with that reason", flush=True)
    rc = subprocess.call(pytest_command(a, profile, out), cwd=out)
    if not junit.exists():
        print(f"hicache conform: pytest wrote no {junit} (exit {rc})", file=sys.stderr)
        return rc or 1
    summary = report.summarize_junit(junit, a.backend, profile)
    report.write_json(summary, out / "summary.json")
    print()
    print(report.format_table(summary))
    print(f"reports: {junit}, {out / 'summary.json'}")
    return rc if rc else (0 if summary.ok else 1)
