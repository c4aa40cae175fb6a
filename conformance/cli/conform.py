"""`hicache conform`: the conformance suites against one backend and profile, through pytest.

Runs `pytest --pyargs conformance` (the installed package: no source checkout needed) in a
child process, writes OUT/junit.xml and OUT/summary.json, and prints a per-module table; then
OUT/report.json and OUT/report.html (conformance.report.document: every target's verdict from
the rows the suite left in OUT/targets, assumptions, environment, plots) and the summary's
target lines (failed and unchecked targets, assumed inputs). A failed target fails the run.
The verdict and the exit status:
  PASS     0  the suites that decide (layout equivalence, bad input) ran and nothing failed
  FAIL     1  a test failed or errored
  NOT RUN  3  the backend is unavailable here, every test of a deciding suite was skipped, or no
              test of theirs ran: nothing was checked, so nothing is signed off (summary.json:
              "ok": false, "verdict": "NOT RUN", "not_run_reason")
  PARTIAL  4  nothing failed, but the deciding suites did not run in full: -k, -m or --deselect
              left some of their tests out (conformance.report.selection counts them), or one was
              not collected; "ok": false, "partial_reason". A subset run is never a sign-off.
  5 when -k matched no test; 2 for a bad argument (pytest's own usage errors too) or an OUT that
  cannot be used; 130 on Ctrl-C.
One run owns OUT at a time (a lock; a second run is refused). OUT must be new, empty or hold a
previous conform report (nothing else: a folder of other files is refused, naming --out); the
run's first act is to delete the previous report (said on stderr), so an interrupted run leaves
no stale verdict. What pytest needs besides (its ini, the target rows, the selection counts)
lives in OUT/.hicache-conform-work (0700), removed with the lock file when the run ends (or by
the next run, after a kill): OUT then holds only junit.xml, summary.json, report.json and
report.html. The pytest child is its own process group (Ctrl-C stops it and its xdist workers)
and is killed by the kernel if this process dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from conformance.cli.errors import EXIT_BAD_INPUT, EXIT_NOT_RUN, EXIT_PARTIAL, CliError, clip, clip_path
from conformance.cli.inputs import is_path, load_profile_arg

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
                        "and xdist is installed), a number, or 0 for one process")
    p.add_argument("--backend-module", action="append", default=[],
                   help="import this module first: it registers an out-of-tree backend (repeatable)")
    # --- L3 storage conformance (conformance/storage/): one block, see _run_storage ---
    p.add_argument("--storage", default=None, metavar="SPEC",
                   help="run the storage suite against an L3 backend instead of the device suites: file:DIR, "
                        "memory:, mooncake:METADATA_URL,MASTER_ADDR, mooncake:auto (starts a loopback cluster) "
                        "or a registered backend's NAME:ARGS (--backend-module imports the module that "
                        "registers it); --backend/--profile do not apply")
    p.add_argument("pytest_args", nargs="*", help="further pytest arguments, after --")


def _check_backend(name: str, modules: list[str]) -> None:
    from hal.backend import available_backends

    for mod in modules:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise CliError("--backend-module", f"cannot import {clip(repr(mod))}: {clip(e, 160)}") from None
    if name not in available_backends():
        raise CliError("--backend", f"unknown backend {clip(repr(name))}; known: {', '.join(available_backends())}")


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


LOCK_NAME = ".hicache-conform.lock"
# in this order: the verdicts go first
RESULTS = ("summary.json", "report.json", "report.html", "junit.xml")
TARGET_ROWS = "targets"  # WORK/targets/<target>.json: the rows conformance/test_targets.py writes
WORK_NAME = ".hicache-conform-work"  # OUT/WORK: the child's ini, target rows and selection counts
# What earlier versions left in OUT besides RESULTS (deleted when OUT is reused), and the
# temporary files of an atomic write cut short: all of them mark a previous conform report.
LEFTOVERS = (LOCK_NAME, "pytest.ini", TARGET_ROWS, WORK_NAME)
_TMP_RESULT = re.compile(r"\.(summary\.json|report\.json|report\.html)\.\d+\.tmp")


def foreign_files(out: Path) -> list[str]:
    """Names in OUT that no conform run writes (sorted); [] for a new, empty or report folder."""
    if not out.is_dir():
        return []
    odd = []
    for entry in out.iterdir():
        name = entry.name
        if name == WORK_NAME and entry.is_dir():
            continue
        if name == TARGET_ROWS and entry.is_dir() and all(f.suffix == ".json" for f in entry.iterdir()):
            continue
        if ((name in RESULTS or name in LEFTOVERS) and not entry.is_dir()) or _TMP_RESULT.fullmatch(name):
            continue
        odd.append(name)
    return sorted(odd)


def _lock(path: Path) -> int:
    """An fd holding an exclusive flock on `path`, the file that is there now: a lock file a
    finishing run unlinked under us is not it (retried). BlockingIOError while another run holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise BlockingIOError(owner) from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def claim_out(out: Path, given: bool) -> int:
    """Create OUT, lock it for this run (fd returned; the kernel drops the lock when this process
    dies, however it dies), and delete the previous run's results, saying so on stderr when a
    report is replaced. CliError naming --out, before anything is changed, for an OUT that is a
    file, cannot be written, is another run's, or holds files that are not a conform report."""
    shown = clip_path(out)
    if out.exists() and not out.is_dir():
        raise CliError("--out", f"{shown}: exists and is not a folder")
    odd = foreign_files(out)
    if odd:
        more = f" and {len(odd) - 1} more" if len(odd) > 1 else ""
        raise CliError("--out", f"{shown}: holds {clip(repr(odd[0]))}{more}, which no hicache conform run "
                                "wrote; pass a new or empty folder, or one holding a previous conform report")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = _lock(out / LOCK_NAME)
    except BlockingIOError as busy:
        raise CliError("--out", f"{shown}: another hicache conform run (pid {busy}) is writing there; "
                                "wait for it or pass another --out") from None
    except OSError as e:
        hint = "" if given else " (the current folder is not writable: pass --out DIR)"
        raise CliError("--out", f"{shown}: cannot be written ({e.strerror or e}){hint}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    old = [name for name in RESULTS if (out / name).exists()]
    if old:
        print(f"hicache: warning: --out {shown}: replacing the previous report ({', '.join(old)})",
              file=sys.stderr, flush=True)
    for name in RESULTS + ("pytest.ini",):
        (out / name).unlink(missing_ok=True)
    for entry in out.iterdir():
        if _TMP_RESULT.fullmatch(entry.name):
            entry.unlink(missing_ok=True)
    shutil.rmtree(out / TARGET_ROWS, ignore_errors=True)
    shutil.rmtree(out / WORK_NAME, ignore_errors=True)
    return fd


def release_out(out: Path, fd: int) -> None:
    """The run is over: its work folder goes, then the lock file (still held, so no run can be
    between open and flock on it unseen: _lock checks the inode), then the lock."""
    try:
        shutil.rmtree(out / WORK_NAME, ignore_errors=True)
        (out / LOCK_NAME).unlink(missing_ok=True)
    finally:
        os.close(fd)


def _workers(value: str) -> list[str]:
    if value in ("0", "1") or importlib.util.find_spec("xdist") is None:
        return []
    if value == "auto":
        return ["-n", "auto"] if (os.cpu_count() or 1) > 1 else []
    if not value.isdigit():
        raise CliError("--workers", f"{clip(repr(value))} is not 'auto' or a number")
    return ["-n", value]


def pytest_command(a, profile: str | None, out: Path, work: Path | None = None) -> list[str]:
    """The child's command line; `work`: the private folder holding its empty ini (default OUT)."""
    ini = (work or out) / "pytest.ini"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance", "-p", "conformance.plugin",
           "-p", "conformance.report.selection",  # counts what -k / -m deselect (the PARTIAL verdict)
           # An empty ini of our own: the caller's pytest config (addopts, testpaths) stays out.
           "-c", str(ini), "--rootdir", str(out), "-p", "no:cacheprovider",
           "-p", "no:benchmark",  # pytest-benchmark, where installed, only warns under xdist
           "--backend", a.backend, "--junitxml", str(out / "junit.xml"), "-q", "--tb=short",
           "--ignore-glob", "*/conformance/storage/*"]  # the storage suite runs under --storage only
    if profile:
        cmd += ["--profile", profile]
    for mod in a.backend_module:
        cmd += ["--backend-module", mod]
    if a.keyword:
        cmd += ["-k", a.keyword]
    if a.exitfirst:
        cmd.append("-x")
    return cmd + _workers(a.workers) + list(a.pytest_args)


PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 5.0


def _die_with_parent(parent: int):
    """preexec for the pytest child: the kernel sends it SIGKILL when this process dies."""
    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def run_child(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> int:
    """pytest in its own process group; on Ctrl-C the whole group (xdist workers too) is stopped
    quietly, SIGTERM first, then SIGKILL, before KeyboardInterrupt goes on to main."""
    proc = subprocess.Popen(cmd, cwd=cwd, process_group=0, preexec_fn=_die_with_parent(os.getpid()), env=env)
    try:
        return proc.wait()
    except BaseException:
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        proc.wait()
        raise


def write_reports(summary, out: Path, backend_name: str, profile: str | None, unavailable: str | None,
                  rows_dir: Path | None = None) -> dict:
    """report.json and report.html (conformance.report.document); prints the target lines of the summary."""
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
    for line in document.summary_lines(doc):
        print(line)
    return doc


# --- L3 storage conformance: `hicache conform --storage SPEC` -----------------------------
def _storage_status(spec: str) -> str | None:
    """None when SPEC's backend opens here, else why not; CliError naming --storage for a bad spec."""
    from hicache_ref.storage import mooncake_cluster
    from hicache_ref.storage.registry import open_storage, split_spec, storage_class

    try:
        name, args = split_spec(spec)
        storage_class(name)
        if name == "mooncake" and args.split(",")[0].strip() == "auto":
            return mooncake_cluster.unavailable_reason()
        open_storage(spec).close()
    except ValueError as e:
        raise CliError("--storage", clip(e, 300)) from None
    except (RuntimeError, ImportError, OSError) as e:
        return clip(e, 300)
    return None


# The storage suites a PASS needs in full (test_concurrency and test_restart add to them, and
# restart skips on stores it cannot restart).
STORAGE_DECIDING = ("test_round_trip", "test_exists", "test_integrity")


def _run_storage(a) -> int:
    from conformance.report import selection
    from conformance.report import summary as report
    from conformance.storage.cases import SPEC_ENV

    _workers(a.workers)
    for mod in a.backend_module:  # an out-of-tree storage backend registers itself at import
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise CliError("--backend-module", f"cannot import {clip(repr(mod))}: {clip(e, 160)}") from None
    why = _storage_status(a.storage)
    label = "storage " + a.storage
    out = Path(a.out or f"hicache-conform-storage-{a.storage.split(':')[0]}").resolve()
    lock = claim_out(out, a.out is not None)
    work = out / WORK_NAME
    try:
        work.mkdir(mode=0o700)
        (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        if why:
            print(f"hicache conform: storage {a.storage!r} is not available here: {why}\n"
                  f"  every test is skipped with that reason; the verdict will be NOT RUN", flush=True)
        cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance.storage", "-p", "conformance.plugin",
               "-p", "conformance.report.selection", "-c", str(work / "pytest.ini"), "--rootdir", str(out),
               "-p", "no:cacheprovider", "-p", "no:benchmark", "--junitxml", str(out / "junit.xml"), "-q", "--tb=short"]
        cmd += [arg for mod in a.backend_module for arg in ("--backend-module", mod)]
        cmd += (["-k", a.keyword] if a.keyword else []) + (["-x"] if a.exitfirst else [])
        counts = work / "selection.json"
        env = {**os.environ, SPEC_ENV: a.storage, selection.SELECTION_ENV: str(counts)}
        rc = run_child(cmd + _workers(a.workers) + list(a.pytest_args), out, env)
        junit = out / "junit.xml"
        if not junit.exists():
            print(f"hicache: {junit}: pytest wrote no report (pytest exit {rc})", file=sys.stderr)
            return 1 if rc in (0, EXIT_NOT_RUN) else _pytest_exit(rc)
        summary = report.summarize_junit(junit, label, None, why, selection.read(counts), deciding=STORAGE_DECIDING)
        report.write_json(summary, out / "summary.json")
        print()
        print(report.format_table(summary))
        print(f"reports: {junit}, {out / 'summary.json'}")
    finally:
        release_out(out, lock)
    if summary.verdict == "FAIL":
        return rc if rc not in (0, EXIT_NOT_RUN) else 1
    if rc == 5:
        return 5
    if rc not in (0, 1):
        return 1 if rc == EXIT_NOT_RUN else _pytest_exit(rc)
    return {"NOT RUN": EXIT_NOT_RUN, "PARTIAL": EXIT_PARTIAL}.get(summary.verdict, 0)
# --- end of the storage block ------------------------------------------------------------


def run(a) -> int:
    from conformance.plugin import backend_status
    from conformance.report import selection
    from conformance.report import summary as report

    if a.storage is not None:
        return _run_storage(a)
    _check_backend(a.backend, a.backend_module)
    profile = _profile_name(a.backend, a.profile)
    _workers(a.workers)  # a bad --workers is refused before OUT is touched
    out = Path(a.out or default_out(a.backend, profile)).resolve()
    lock = claim_out(out, a.out is not None)
    work = out / WORK_NAME
    try:
        work.mkdir(mode=0o700)
        (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        (work / TARGET_ROWS).mkdir()
        junit = out / "junit.xml"
        ok, why = backend_status(a.backend)
        if not ok:
            print(f"hicache conform: backend {a.backend!r} is not available here: {why}\n"
                  f"  every test that needs it is skipped with that reason; the verdict will be NOT RUN", flush=True)
        from conformance.test_targets import RESULTS_ENV

        counts = work / "selection.json"
        env = {**os.environ, RESULTS_ENV: str(work / TARGET_ROWS), selection.SELECTION_ENV: str(counts)}
        rc = run_child(pytest_command(a, profile, out, work), out, env)
        if not junit.exists():
            print(f"hicache: {junit}: pytest wrote no report (pytest exit {rc})", file=sys.stderr)
            return 1 if rc in (0, EXIT_NOT_RUN) else _pytest_exit(rc)
        summary = report.summarize_junit(junit, a.backend, profile, None if ok else str(why), selection.read(counts))
        report.write_json(summary, out / "summary.json")
        print()
        print(report.format_table(summary))
        signed = write_reports(summary, out, a.backend, profile, None if ok else str(why), work / TARGET_ROWS)
        print(f"reports: {junit}, {out / 'summary.json'}, {out / 'report.json'}, {out / 'report.html'}")
    finally:
        release_out(out, lock)
    if signed["verdict"] == "FAIL" and summary.verdict != "FAIL":  # a failed target without a failed test
        return 1
    if summary.verdict == "FAIL":
        return rc if rc not in (0, EXIT_NOT_RUN) else 1
    if rc == 5:  # pytest: no test collected (-k matched nothing)
        return 5
    if rc not in (0, 1):  # pytest stopped for its own reason (interrupted, internal, usage)
        return 1 if rc == EXIT_NOT_RUN else _pytest_exit(rc)
    return {"NOT RUN": EXIT_NOT_RUN, "PARTIAL": EXIT_PARTIAL}.get(summary.verdict, 0)


PYTEST_USAGE_ERROR = 4


def _pytest_exit(rc: int) -> int:
    """pytest's own exit status as ours: its usage error (4: a bad argument after --) is bad input."""
    return EXIT_BAD_INPUT if rc == PYTEST_USAGE_ERROR else rc
