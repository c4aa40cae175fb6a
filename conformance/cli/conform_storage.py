"""`hicache conform --storage SPEC`: the storage suite (conformance/suites/storage/) against an L3 backend.

The same machinery as the device suites (conformance.cli.conform): the output folder's lock and
work folder, the pytest child, the selection counts behind the PARTIAL verdict; its own deciding
suites.
"""

from __future__ import annotations

import importlib
import os
import secrets
import sys
from pathlib import Path

from conformance.cli.conform_args import selected_nothing, take_junit
from conformance.cli.out_folder import WORK_NAME, claim_out, release_out
from conformance.cli.pytest_child import crashed_workers_line, pytest_exit, run_child, workers_args
from conformance.common.errors import EXIT_NOT_RUN, EXIT_PARTIAL, CliError, clip, clip_path
from conformance.common.safe_write import write_text


def _storage_status(spec: str) -> str | None:
    """None when SPEC's backend opens here, else why not; CliError naming --storage for a bad spec."""
    from hicache_ref.storage import mooncake_cluster
    from hicache_ref.storage.registry import open_storage, split_spec, storage_class

    try:
        name, args = split_spec(spec)
        storage_class(name)
        if name == "mooncake" and args.split(",")[0].strip() == "auto":
            why = mooncake_cluster.unavailable_reason()
            if why is None:  # the test run's clients say so in the pytest child, which captures it
                print(f"hicache: warning: --storage {clip(spec)}: {LISTENER_WARNING}", file=sys.stderr, flush=True)
            return why
        store = open_storage(spec)
        store.close()
        _check_room(store)
        _say_bound(spec, store)
    except ValueError as e:
        raise CliError("--storage", clip(e, 300)) from None
    except (RuntimeError, ImportError, OSError) as e:
        return clip(e, 300)
    return None


def _check_room(store) -> None:
    """CliError naming --storage for a store that cannot hold one page of the suite: a bound below a
    page, or a folder that cannot be written. Every test would fail on it, saying nothing about the
    backend."""
    from conformance.suites.storage.page_pools import PAGE_BYTES

    page = max(PAGE_BYTES.values())
    bound = getattr(store, "max_bytes", None)
    if bound is not None and bound < page:
        raise CliError("--storage", f"max_bytes={bound:,} cannot hold one page of the storage suite ({page} "
                                    "bytes); give a larger bound")
    folder = getattr(store, "directory", None)
    if folder is None:
        return
    probe = os.path.join(folder, f".hicache-probe-{secrets.token_hex(8)}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except OSError as e:
        raise CliError("--storage", f"{clip_path(folder)}: cannot be written ({e.strerror or e}); the store "
                                    "could not hold one page") from None


LISTENER_WARNING = ("the Mooncake clients of this run listen on every interface (0.0.0.0 and [::]: the "
                    "client library binds them all; its data port serves the memory the client registered, "
                    "host KV included): firewall their ports on a shared host")


def _say_bound(spec: str, store) -> None:
    """The store's size bound on stdout, for backends that have one (file:DIR is always bounded)."""
    bound = getattr(store, "max_bytes", None)
    if bound is not None:
        how = "default: half the free space at open" if getattr(store, "max_bytes_default", False) else "given"
        print(f"hicache conform: storage {spec!r}: bound max_bytes={bound} ({how})", flush=True)


# The storage suites a PASS needs in full (test_concurrency and test_restart add to them, and
# restart skips on stores it cannot restart).
STORAGE_DECIDING = ("test_round_trip", "test_exists", "test_integrity")


def run_storage(a) -> int:
    from conformance.report import run_verdict as report
    from conformance.report import selection
    from conformance.suites.storage.page_pools import SPEC_ENV

    workers_args(a.workers)  # already bounded by conform.run
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
        write_text(work / "pytest.ini", "[pytest]\n")
        if why:
            print(f"hicache conform: storage {a.storage!r} is not available here: {why}\n"
                  f"  every test is skipped with that reason; the verdict will be NOT RUN", flush=True)
        cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance.suites.storage", "-p", "conformance.plugin",
               "-p", "conformance.report.selection", "-c", str(work / "pytest.ini"), "--rootdir", str(out),
               "-p", "no:cacheprovider", "-p", "no:benchmark", "--basetemp", str(work / "tmp"), "--junitxml", str(work / "junit.xml"), "-q",
               "--tb=short"]
        cmd += [arg for mod in a.backend_module for arg in ("--backend-module", mod)]
        cmd += (["-k", a.keyword] if a.keyword else []) + (["-x"] if a.exitfirst else [])
        counts = work / "selection.json"
        env = {**os.environ, SPEC_ENV: a.storage, selection.SELECTION_ENV: str(counts)}
        rc = run_child(cmd + workers_args(a.workers) + list(a.pytest_args), out, env)
        junit = take_junit(work / "junit.xml", out / "junit.xml")
        if junit is None:
            print(f"hicache: {out / 'junit.xml'}: pytest wrote no report (pytest exit {rc})", file=sys.stderr)
            return 1 if rc in (0, EXIT_NOT_RUN) else pytest_exit(rc)
        summary = report.summarize_junit(junit, label, None, why, selection.read(counts), deciding=STORAGE_DECIDING)
        summary.stopped = selection.unreported(counts, summary.tests)
        report.write_json(summary, out / "summary.json")
        print()
        print(report.format_table(summary))
        if (crashed := crashed_workers_line(summary.failures)) is not None:
            print(f"hicache: {crashed}", file=sys.stderr)
        print(f"reports: {junit}, {out / 'summary.json'}")
    finally:
        release_out(out, lock)
    if summary.verdict == "FAIL":
        return rc if rc not in (0, EXIT_NOT_RUN) else 1
    if rc == 5:
        return 5 if selected_nothing(a.keyword, a.pytest_args) else EXIT_NOT_RUN
    if rc not in (0, 1):
        return 1 if rc == EXIT_NOT_RUN else pytest_exit(rc)
    return {"NOT RUN": EXIT_NOT_RUN, "PARTIAL": EXIT_PARTIAL}.get(summary.verdict, 0)
