"""tox.ini and the ci/ scripts its envs run: one list of Python 3.10 tests, conform's arguments and
verdicts passed through, the node's torch never resolved by the cuda/xpu envs' install."""

from __future__ import annotations

import configparser
import json
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIST = ROOT / "ci" / "py310-tests.txt"
TEST_FILE = re.compile(r"\btests/[\w/]+\.py\b")


def _tox() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "tox.ini")
    return cfg


def _listed() -> list[str]:
    return [ln.strip() for ln in LIST.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def test_every_listed_py310_test_exists_once():
    listed = _listed()
    assert listed, "ci/py310-tests.txt lists no tests"
    assert len(set(listed)) == len(listed), "a test is listed twice"
    missing = [p for p in listed if not (ROOT / p).is_file()]
    assert not missing, f"ci/py310-tests.txt names files that do not exist: {missing}"


def test_tox_and_test_py310_take_their_tests_from_the_one_list():
    """Neither names a test file by hand: both run ci/py310-check.sh, which reads the list."""
    cfg = _tox()
    for env in ("py310-torch29", "py310-torch25"):
        commands = cfg[f"testenv:{env}"]["commands"]
        assert not TEST_FILE.search(commands), f"tox.ini's {env} lists test files by hand"
        if commands.strip() == "{[testenv:py310-torch29]commands}":
            commands = cfg["testenv:py310-torch29"]["commands"]
        assert "ci/py310-check.sh" in commands, f"tox.ini's {env} does not run ci/py310-check.sh"
    script = (ROOT / "ci" / "test-py310.sh").read_text()
    assert not TEST_FILE.search(script), "ci/test-py310.sh lists test files by hand"
    assert "ci/py310-check.sh" in script
    assert "ci/py310-tests.txt" in (ROOT / "ci" / "py310-check.sh").read_text()


def _fake_bin(tmp_path: Path, hicache: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hicache").write_text(hicache)
    (bin_dir / "hicache").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    return bin_dir


# Stands in for `hicache conform`: writes a summary.json with FAKE_ANSWER as its answer.
FAKE_CONFORM = r'''#!/usr/bin/env bash
echo "$*" >> "${FAKE_LOG:-/dev/null}"
while [ $# -gt 0 ]; do [ "$1" = --out ] && out="$2"; shift; done
[ -z "${out:-}" ] && exit "${FAKE_RC:-0}"
mkdir -p "$out"
echo "{\"verdict\": \"PASS\", \"answer\": \"${FAKE_ANSWER:-yes}\"}" > "$out/summary.json"
exit "${FAKE_RC:-0}"
'''


def _check(tmp_path, reference, env=None, root=ROOT):
    bin_dir = _fake_bin(tmp_path, FAKE_CONFORM)
    full = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            **(env or {})}
    return subprocess.run(["bash", str(root / "ci" / "py310-check.sh"), str(reference)], env=full,
                          capture_output=True, text=True, timeout=120)


def test_py310_check_fails_when_conform_figures_differ_from_the_default_pythons(tmp_path):
    ref = tmp_path / "summary.json"
    ref.write_text(json.dumps({"verdict": "PASS", "answer": "no"}))
    r = _check(tmp_path, ref, {"FAKE_ANSWER": "yes"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "differ" in r.stderr and "['answer']" in r.stderr


def test_py310_check_fails_when_conform_does_not_pass(tmp_path):
    ref = tmp_path / "summary.json"
    ref.write_text(json.dumps({"verdict": "PASS", "answer": "yes"}))
    r = _check(tmp_path, ref, {"FAKE_RC": "3"})
    assert r.returncode == 1
    assert "did not PASS" in r.stderr


def test_py310_check_refuses_a_listed_test_that_does_not_exist(tmp_path):
    copy = tmp_path / "repo"
    (copy / "ci").mkdir(parents=True)
    shutil.copy(ROOT / "ci" / "py310-check.sh", copy / "ci")
    (copy / "ci" / "py310-tests.txt").write_text("# one gone\ntests/hal/test_gone.py\n")
    ref = tmp_path / "summary.json"
    ref.write_text("{}")
    r = _check(tmp_path, ref, root=copy)
    assert r.returncode == 2
    assert r.stderr.strip() == "ci/py310-check.sh: ci/py310-tests.txt: 'tests/hal/test_gone.py' does not exist"


@pytest.mark.parametrize(("args", "expected"), [
    (["cuda"], "conform --backend cuda --out reports/conform-cuda"),
    (["cuda", "-k", "round_trip"], "conform --backend cuda --out reports/conform-cuda -k round_trip"),
    (["xpu", "p800", "-x"], "conform --backend xpu --profile p800 --out reports/conform-xpu-p800 -x"),
    (["xpu", "/o/p800-measured.yaml"],
     "conform --backend xpu --profile /o/p800-measured.yaml --out reports/conform-xpu-p800-measured"),
])
def test_conform_sh_takes_a_profile_only_where_one_is_given(tmp_path, args, expected):
    bin_dir = _fake_bin(tmp_path, "#!/usr/bin/env bash\necho \"$*\" > \"$FAKE_LOG\"\n")
    log = tmp_path / "log"
    env = {k: v for k, v in os.environ.items() if k != "HICACHE_REPORT_DIR"}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", FAKE_LOG=str(log))
    subprocess.run(["bash", str(ROOT / "ci" / "conform.sh"), *args], env=env, check=True, timeout=30)
    assert log.read_text().strip() == expected


def test_conform_sh_exits_with_conforms_not_run_code(tmp_path):
    """NOT RUN (3) reaches tox, which exits with it for a single env: CI tells it from a failure (1)."""
    bin_dir = _fake_bin(tmp_path, FAKE_CONFORM)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_RC": "3",
           "HICACHE_REPORT_DIR": str(tmp_path)}
    r = subprocess.run(["bash", str(ROOT / "ci" / "conform.sh"), "cuda"], env=env, timeout=30)
    assert r.returncode == 3


def test_device_envs_never_resolve_torch():
    """cuda and xpu install nothing through tox (no deps, no package) and see the node's site packages."""
    cfg = _tox()
    for env in ("cuda", "xpu"):
        sec = cfg[f"testenv:{env}"]
        assert sec.get("deps", "").strip() == ""
        assert sec.get("skip_install") == "true"
        assert sec.get("system_site_packages") == "true"
        assert "ci/tox-node-env.py" in cfg["testenv:cuda"]["commands_pre"]


def test_node_env_installs_every_requirement_but_torch(monkeypatch):
    node_env = runpy.run_path(str(ROOT / "ci" / "tox-node-env.py"))
    reqs = ["torch>=2.5.1", "numpy>=1.26", "Torch ; extra == 'test'", "pytest-xdist>=3; extra == \"test\"",
            "mooncake-transfer-engine-non-cuda>=0.3.13; extra == \"mooncake\"", "scipy>=1.10"]
    monkeypatch.setattr(node_env["metadata"], "requires", lambda dist: reqs)
    assert node_env["requirements"]() == ["numpy>=1.26", "scipy>=1.10"]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_py310_check_ends_its_step_when_signalled_alone(tmp_path, sig, code):
    """tox signals the script, not its group: the running step must not outlive it."""
    pid_file = tmp_path / "pid"
    bin_dir = _fake_bin(tmp_path, f'#!/usr/bin/env bash\necho $$ > "{pid_file}.tmp"; mv "{pid_file}.tmp" '
                                  f'"{pid_file}"; exec sleep 60\n')
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(["bash", str(ROOT / "ci" / "py310-check.sh"), str(bin_dir / "hicache")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    step = int(pid_file.read_text())
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == code
    with pytest.raises(ProcessLookupError):
        os.kill(step, 0)
