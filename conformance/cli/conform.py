"""`hicache conform`: the conformance suites against one backend and profile, through pytest.

It runs `pytest --pyargs conformance.suites` in a child process, so no source checkout is needed.
It writes OUT/junit.xml, summary.json, report.json and report.html, and prints a per-module table.
The verdict is PASS (0), FAIL (1), NOT RUN (3) or PARTIAL (4); a subset run is never a sign-off.
Verdicts, exit statuses and how OUT is owned: docs/architecture.md, "Design notes".
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

from conformance.cli.conform_args import (
    bound_workers,
    check_child_args,
    check_keyword,
    check_pytest_parses,
    count_backend,
    selected_nothing,
    take_junit,
)
from conformance.cli.conform_storage import run_storage
from conformance.cli.out_folder import TARGET_ROWS, WORK_NAME, claim_out, release_out
from conformance.cli.pytest_child import (
    crashed_workers_line,
    killed_line,
    pytest_exit,
    run_child,
    workers_args,
)
from conformance.common.backend_choice import check_backend
from conformance.common.errors import EXIT_BAD_INPUT, EXIT_NOT_RUN, EXIT_PARTIAL, CliError
from conformance.common.inputs import is_path, load_profile_arg
from conformance.common.safe_write import write_text
from conformance.report.write_guard import EXIT_UNWRITTEN
from hicache_ref.engines import DEFAULT_ENGINE, ENGINES, not_run_reason

HELP = "run the conformance suites (layout equivalence, bad input, targets) on a backend and profile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="emu", help="emu (default), cuda, xpu or a registered backend")
    p.add_argument("--profile", default=None,
                   help="hardware profile name or YAML path (default: emu for emu, p800 for xpu, "
                        "else one named like the backend if it ships)")
    p.add_argument("--out", default=None, help="report folder (default: ./hicache-conform-BACKEND-PROFILE; a "
                   "profile given as a path is named by its stem and a hash of its path)")
    p.add_argument("-k", dest="keyword", default=None, help="only tests matching this pytest -k expression")
    p.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failure")
    p.add_argument("-n", "--workers", default="auto",
                   help="pytest-xdist workers: 'auto' (one per core, when there is more than one core "
                        "and xdist is installed), a number (at most the cores here: more is cut to that, "
                        "with a warning), or 0 for one process")
    p.add_argument("--backend-module", action="append", default=[],
                   help="import this module first: it registers an out-of-tree backend (repeatable)")
    p.add_argument("--engine", default=DEFAULT_ENGINE, choices=ENGINES,
                   help="which HiCache replays the readings' seed scenario: reference (default), or sglang "
                        "(SGLang's installed HiCache on the HAL; a state it does not run, or SGLang absent here: "
                        "those readings are not measured, with the reason)")
    # --- L3 storage conformance (conformance/suites/storage/): one block, see conformance.cli.conform_storage ---
    p.add_argument("--storage", default=None, metavar="SPEC",
                   help="run the storage suite against an L3 backend instead of the device suites: file:DIR, "
                        "memory:, mooncake:METADATA_URL,MASTER_ADDR, mooncake:auto (starts a loopback cluster) "
                        "or a registered backend's NAME:ARGS (--backend-module imports the module that "
                        "registers it); --backend/--profile do not apply")
    p.add_argument("pytest_args", nargs="*", help="further pytest arguments, after --")


def _profile_name(backend: str, profile: str | None) -> str | None:
    from conformance.plugin import default_profile_name

    if profile is None:
        return default_profile_name(backend)
    load_profile_arg("--profile", profile)  # one line naming the file and what was expected
    return str(Path(profile).resolve()) if is_path(profile) else profile  # the child runs in OUT


def default_out(backend: str, profile: str | None) -> Path:
    """./hicache-conform-BACKEND-PROFILE; a profile path adds a hash of the path, so two
    profiles with the same file stem in different folders get different folders."""
    if profile is None:
        label = "noprofile"
    elif is_path(profile):
        label = f"{Path(profile).stem}-{hashlib.sha256(profile.encode()).hexdigest()[:8]}"
    else:
        label = profile
    return Path(f"hicache-conform-{backend}-{label}")


def pytest_command(a, profile: str | None, out: Path, work: Path | None = None) -> list[str]:
    """The child's command line; `work`: the private folder holding its empty ini and the junit
    pytest writes (default OUT); conform moves the junit into OUT itself (safe_write)."""
    ini = (work or out) / "pytest.ini"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance.suites", "-p", "conformance.plugin",
           "-p", "conformance.report.selection",  # counts what -k / -m deselect (the PARTIAL verdict)
           "-p", "conformance.report.write_guard",  # a report it cannot write: one line, exit 74
           # An empty ini of our own: the caller's pytest config (addopts, testpaths) stays out.
           "-c", str(ini), "--rootdir", str(out), "-p", "no:cacheprovider",
           "-p", "no:benchmark",  # pytest-benchmark, where installed, only warns under xdist
           "--basetemp", str((work or out) / "tmp"),  # tmp_path folders go with the work folder, not in $TMPDIR
           "--backend", a.backend, "--engine", a.engine, "--junitxml", str((work or out) / "junit.xml"), "-q", "--tb=short",
           "--ignore-glob", "*/conformance/suites/storage/*"]  # the storage suite runs under --storage only
    if profile:
        cmd += ["--profile", profile]
    for mod in a.backend_module:
        cmd += ["--backend-module", mod]
    if a.keyword:
        cmd += ["-k", a.keyword]
    if a.exitfirst:
        cmd.append("-x")
    return cmd + workers_args(a.workers) + list(a.pytest_args)


def write_reports(summary, out: Path, backend_name: str, profile: str | None, unavailable: str | None,
                  rows_dir: Path | None = None) -> dict:
    """report.json and report.html (conformance.report.document); sets the summary's answer."""
    from conformance.report import document

    loaded = None
    if profile is not None:
        from hardware_profiles import load_profile

        loaded = load_profile(profile)
    backend = None
    if unavailable is None:
        from hal.backend import get_backend

        backend = get_backend(backend_name, loaded)
    try:
        doc = document.build(summary, out, loaded, backend, unavailable, rows_dir=rows_dir)
    finally:
        if backend is not None:
            backend.close()
    document.write(doc, out)
    return doc




def run(a) -> int:
    from conformance.plugin import backend_status
    from conformance.report import run_verdict as report
    from conformance.report import selection

    check_keyword(a.keyword)
    check_child_args(a.pytest_args)
    a.workers = bound_workers(a.workers)  # -n past the cores: the cores
    check_pytest_parses(workers_args(a.workers) + list(a.pytest_args))  # pytest's own refusals, before OUT
    if a.storage is not None:
        if a.engine != DEFAULT_ENGINE:  # the storage suite replays nothing: an engine there would be ignored
            raise CliError("--engine", "conform --storage runs the storage suite, which replays nothing; drop --engine")
        return run_storage(a)
    check_backend(a.backend, a.backend_module)
    count_backend(a.backend)
    profile = _profile_name(a.backend, a.profile)
    workers_args(a.workers)  # a bad --workers is refused before OUT is touched
    out = Path(a.out or default_out(a.backend, profile)).resolve()
    lock = claim_out(out, a.out is not None)
    work = out / WORK_NAME
    try:
        work.mkdir(mode=0o700)
        write_text(work / "pytest.ini", "[pytest]\n")
        (work / TARGET_ROWS).mkdir()
        ok, why = backend_status(a.backend)
        if not ok:
            print(f"hicache conform: backend {a.backend!r} is not available here: {why}\n"
                  f"  every test that needs it is skipped with that reason; the verdict will be NOT RUN", flush=True)
        if (engine_why := not_run_reason(a.engine)) is not None:
            print(f"hicache conform: NOT RUN: engine {a.engine}: {engine_why}\n"
                  "  the readings it would replay are not measured with that reason", flush=True)
        from conformance.targets.judgment import RESULTS_ENV

        counts = work / "selection.json"
        env = {**os.environ, RESULTS_ENV: str(work / TARGET_ROWS), selection.SELECTION_ENV: str(counts)}
        rc = run_child(pytest_command(a, profile, out, work), out, env)
        if rc == EXIT_UNWRITTEN:  # the child said which file (write_guard); nothing to judge
            return EXIT_BAD_INPUT
        junit = take_junit(work / "junit.xml", out / "junit.xml")
        if junit is None and (killed := killed_line(rc)) is not None:
            print(f"hicache: {killed}", file=sys.stderr)
            return 128 - rc
        if junit is None:
            print(f"hicache: {out / 'junit.xml'}: pytest wrote no report (pytest exit {rc})", file=sys.stderr)
            return 1 if rc in (0, EXIT_NOT_RUN) else pytest_exit(rc)
        summary = report.summarize_junit(junit, a.backend, profile, None if ok else str(why), selection.read(counts))
        if rc not in (0, 1, 5, EXIT_NOT_RUN) or (rc == 1 and not summary.failures):
            summary.stopped = f"pytest stopped before its session ended (exit {rc}): only what ran before is reported"
        summary.stopped = summary.stopped or selection.unreported(counts, summary.tests)
        report.write_json(summary, out / "summary.json")  # the junit record, kept if the report fails
        try:
            signed = write_reports(summary, out, a.backend, profile, None if ok else str(why), work / TARGET_ROWS)
        finally:
            report.write_json(summary, out / "summary.json")  # now with the answer and the target counts
            print()
            print(report.format_table(summary))  # opens with the answer
            if (crashed := crashed_workers_line(summary.failures)) is not None:
                print(f"hicache: {crashed}", file=sys.stderr)
        from conformance.report import document

        for line in document.summary_lines(signed):
            print(line)
        print(f"reports: {junit}, {out / 'summary.json'}, {out / 'report.json'}, {out / 'report.html'}")
    finally:
        release_out(out, lock)
    if signed["verdict"] == "FAIL" and summary.verdict != "FAIL":  # a failed target without a failed test
        return 1
    if summary.verdict == "FAIL":
        return rc if rc not in (0, EXIT_NOT_RUN) else 1
    if rc == 5:  # pytest: no test collected; 5 is a selection (-k, -m, --deselect) that matched nothing
        return 5 if selected_nothing(a.keyword, a.pytest_args) else EXIT_NOT_RUN
    if rc not in (0, 1):  # pytest stopped for its own reason (interrupted, internal, usage)
        return 1 if rc == EXIT_NOT_RUN else pytest_exit(rc)
    return {"NOT RUN": EXIT_NOT_RUN, "PARTIAL": EXIT_PARTIAL}.get(summary.verdict, 0)

