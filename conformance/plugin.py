"""pytest plugin for the conformance suites: which backend and profile, fixtures, need markers.

Installing hicache-harness registers it (entry point group `pytest11`, named `conformance.plugin`).
The name matches the module, so `-p conformance.plugin` is the same plugin, not a second one.
Options: `--backend`, `--profile`, `--backend-module`; fixtures: `backend`, `profile`, `kv`, `kv_memory`.
Markers say what a test needs beyond a working backend; unmet needs skip it with the reason.
Disable it with `-p no:conformance.plugin`. Details: docs/architecture.md, "Design notes".
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

from hicache_ref.engines import DEFAULT_ENGINE, ENGINES

MARKERS = {
    "needs_profile": "needs a loaded hardware profile (--profile, or the backend's default one)",
    "needs_modeled_clock": "needs a backend whose events carry modeled time from the profile's link model",
    "needs_host_registration": "needs a backend that registers (pins) host memory for DMA",
    "needs_sglang": "needs SGLang at the pinned version (the [sglang] extra: ci/install-sglang.sh)",
}

_STATE = pytest.StashKey[dict]()
_BODY_RAN = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hicache", "HiCache conformance (conformance.plugin)")
    group.addoption("--backend", default=os.environ.get("HICACHE_BACKEND", "emu"),
                    help="backend under test: emu, cuda, xpu or a registered out-of-tree name (default: emu)")
    group.addoption("--profile", default=None,
                    help="hardware profile name or YAML path (default: emu for emu, p800 for xpu, "
                         "else a profile named like the backend if one ships)")
    group.addoption("--backend-module", action="append", default=[],
                    help="import this module before resolving --backend (it registers a backend); repeatable")
    group.addoption("--engine", default=DEFAULT_ENGINE, choices=ENGINES,
                    help="which HiCache replays what a target replays (the readings' seed scenario): reference, "
                         "or sglang (a state it does not run, or SGLang absent: those readings not measured)")


def backend_modules(config: pytest.Config) -> list[str]:
    extra = [m.strip() for m in os.environ.get("HICACHE_BACKEND_MODULES", "").split(",") if m.strip()]
    return list(config.getoption("backend_module") or []) + extra


def default_profile_name(backend: str) -> str | None:
    """The profile a backend gets when --profile is not given: its own `default_profile`, else a
    profile of its name if one ships, else none (suites that need one then skip and say so)."""
    from hal.backend import backend_class
    from hardware_profiles import list_profiles

    try:
        own = getattr(backend_class(backend), "default_profile", None)
    except ImportError:  # a backend that cannot import here has no say
        own = None
    if own is not None:
        return own
    return backend if backend in list_profiles() else None


_PARENT_ENV = "HICACHE_PYTEST_PARENT"  # the pid of the pytest process that starts the xdist workers


def _die_with_the_controller(config: pytest.Config) -> None:
    """xdist workers are the pytest process's children, not ours: each asks the kernel to kill it
    when that process dies (SIGKILL included), so none outlives `hicache conform` under pid 1."""
    from hal.children import die_with_parent

    if hasattr(config, "workerinput"):  # an xdist worker (the variable PYTEST_XDIST_WORKER may be inherited)
        parent = os.environ.get(_PARENT_ENV, "")
        die_with_parent(int(parent) if parent.isdigit() else None)
    else:
        os.environ[_PARENT_ENV] = str(os.getpid())  # inherited by the workers it starts


def pytest_configure(config: pytest.Config) -> None:
    for name, desc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {desc}")
    _die_with_the_controller(config)
    if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("OMP_NUM_THREADS"):
        # xdist already runs one worker per core; torch's intra-op threads on top oversubscribe
        # the cores, and their spin-waits made this suite 4x slower on 2 loaded cores.
        torch.set_num_threads(1)
    from hal.backend import available_backends

    for mod in backend_modules(config):
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise pytest.UsageError(f"--backend-module: cannot import {mod!r}: {e}") from e
    name = config.getoption("backend")
    if name not in available_backends():
        raise pytest.UsageError(f"--backend: unknown backend {name!r}; known: {', '.join(available_backends())}")
    explicit = config.getoption("profile")
    state = {"backend": name, "profile_name": explicit or default_profile_name(name), "profile": None}
    if explicit:
        # A profile the user named must load: a typo is a usage error, not a suite of skips.
        state["profile"] = _load_profile(explicit)
    config.stash[_STATE] = state


def _load_profile(name: str):
    from hardware_profiles import load_profile

    try:
        return load_profile(name)
    except (ValueError, OSError) as e:
        raise pytest.UsageError(f"--profile: {e}") from e


def backend_status(name: str) -> tuple[bool, str]:
    """(available, reason) of a backend by name, without constructing it."""
    from hal.backend import backend_class

    try:
        cls = backend_class(name)
    except ImportError as e:  # a backend whose module cannot import here is as absent as its hardware
        return False, f"backend {name!r} cannot be imported here: {type(e).__name__}: {e}"
    return cls.probe()


def pytest_report_header(config: pytest.Config) -> str:
    state = config.stash.get(_STATE, None)
    if state is None:
        return ""
    ok, why = backend_status(state["backend"])
    where = "available" if ok else f"NOT available: {why}"
    return f"hicache conformance: backend={state['backend']} ({where}), profile={state['profile_name'] or 'none'}"


@pytest.fixture(scope="session")
def backend_name(pytestconfig: pytest.Config) -> str:
    return pytestconfig.stash[_STATE]["backend"]


@pytest.fixture(scope="session")
def profile(pytestconfig: pytest.Config):
    """The loaded hardware_profiles.profile.Profile, or None when --profile was not given and none is the default."""
    state = pytestconfig.stash[_STATE]
    if state["profile"] is None and state["profile_name"] is not None:
        state["profile"] = _load_profile(state["profile_name"])
    return state["profile"]


@pytest.fixture(scope="session")
def backend(backend_name: str, profile):
    ok, why = backend_status(backend_name)
    if not ok:
        pytest.skip(f"backend {backend_name!r} unavailable: {why}")
    from hal.backend import get_backend

    with get_backend(backend_name, profile) as b:
        yield b


@pytest.fixture
def kv(backend):
    """hal.transfer.kvcacheio with every op in this test running on `backend`'s default stream."""
    from hal.transfer import kvcacheio

    with kvcacheio.use(backend):
        yield kvcacheio


class KVMemory:
    """Buffers as the backend's users get them: device pools from the backend, host pools pinned."""

    def __init__(self, backend):
        self.backend = backend
        self.pin = backend.device_type != "cpu"  # pinning a CPU-only run buys nothing and costs mlock

    def device(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return self.backend.alloc_device(tuple(shape), dtype)

    def host(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype, pin_memory=self.pin)

    def synchronize(self) -> None:
        self.backend.default_stream().synchronize()


@pytest.fixture(scope="session")
def kv_memory(backend) -> KVMemory:
    return KVMemory(backend)


@pytest.fixture(autouse=True)
def _hicache_needs(request: pytest.FixtureRequest):
    # Only tests carrying a needs_* marker touch the backend here, so the harness's own tests
    # (which load this plugin too) never construct one through it.
    node = request.node
    if node.get_closest_marker("needs_profile") and request.getfixturevalue("profile") is None:
        pytest.skip("no hardware profile: pass --profile")
    for marker, cap in (("needs_modeled_clock", "modeled_clock"), ("needs_host_registration", "host_registration")):
        if node.get_closest_marker(marker):
            caps = request.getfixturevalue("backend").capabilities()
            if not getattr(caps, cap):
                pytest.skip(f"backend {caps.name!r} has no {cap.replace('_', ' ')}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    item.stash[_BODY_RAN] = True  # the body is about to run: only then can the test pass
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A test whose setup and teardown passed but whose body never ran (`--setup-only`, `--setup-plan`)
    is marked in its report, so junit carries it and the summary counts it not run, never passed."""
    report = yield
    if call.when == "teardown" and not item.stash.get(_BODY_RAN, False):
        from conformance.report.run_verdict import BODY_NOT_RUN

        report.user_properties.append((BODY_NOT_RUN, "1"))
    return report


# -- the console: a seed reading the model misses is the model's, not a failed test of this node --
# (its junit record stays a failure: conformance.report.run_verdict counts it as the model's verdict)
MODEL_READINGS = "modeled readings outside tolerance"


def _is_reading(report) -> bool:
    from conformance.report.run_verdict import is_reading_test

    return report.when == "call" and "test_targets.py::" in report.nodeid and is_reading_test(report.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report, config):
    if report.failed and _is_reading(report):
        return MODEL_READINGS, "m", "MODEL: OUTSIDE TOLERANCE"
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    missed = terminalreporter.stats.get(MODEL_READINGS, [])
    if not missed:
        return
    terminalreporter.write_sep("=", f"the model: {len(missed)} seed readings outside tolerance "
                                    "(the model's verdict, not this node's)")
    for report in missed:
        crash = getattr(report.longrepr, "reprcrash", None)
        why = crash.message if crash is not None else str(report.longrepr).strip()
        first = why.strip().splitlines()[0] if why.strip() else "no message"
        terminalreporter.write_line(f"{report.nodeid.rpartition('::')[2]}: {first.removeprefix('AssertionError: ')}")
