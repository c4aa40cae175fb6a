"""Sets up tox's cuda and xpu envs on a node's own torch: the harness goes in, torch stays the node's.

tox runs this with the env's Python before conform (commands_pre). The node's Python is
$HICACHE_NODE_PYTHON, else the first python3 on PATH outside the env (an activated vendor venv or
conda env, or the system's). The env sees the system site packages (system_site_packages); a
venv's own site-packages are not among them, so the node Python's site-packages directories are
added to the env through a .pth file. Then the harness is installed with --no-deps and its other
requirements under a constraint pinning torch to the version found: nothing resolves torch, so
nothing can pull or replace it. The torch imported before and after must be the same version
from the same place, outside the env. Runs on Python 3.10 (no tomllib: the requirements come from
the installed package's metadata).
Exit 2, one line: no node Python, another Python version than the env's, no importable torch,
torch inside the env, or a pip install that failed. Exit 1: the install changed torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = "hicache-harness"
PTH = "_hicache_node_site.pth"
EXTRAS: set[str] = set()  # conform runs without the test extra (no xdist: one worker)
PROBE = ("import json, os, sys; print(json.dumps({'version': list(sys.version_info[:2]), 'sites': "
         "[p for p in sys.path if p and os.path.isdir(p) and os.path.basename(p) in "
         "('site-packages', 'dist-packages')]}))")
TORCH = "import json, torch; print(json.dumps([torch.__version__, torch.__file__]))"


def fail(code: int, msg: str) -> None:
    print(f"tox -e {os.environ.get('TOX_ENV_NAME', '?')}: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def node_python() -> str:
    """$HICACHE_NODE_PYTHON, else the first python3 on PATH that is not this env's."""
    given = os.environ.get("HICACHE_NODE_PYTHON")
    if given:
        if shutil.which(given) is None:
            fail(2, f"HICACHE_NODE_PYTHON: '{given}' is not an executable")
        return shutil.which(given)
    own = os.path.realpath(os.path.join(sys.prefix, "bin"))
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and os.path.realpath(d) != own]
    found = shutil.which("python3", path=os.pathsep.join(path))
    if found is None:
        fail(2, "no python3 on PATH outside the env: set HICACHE_NODE_PYTHON to the node's Python")
    return found


def link_node_sites(python: str) -> None:
    out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True)
    if out.returncode != 0:
        fail(2, f"the node's Python {python} does not run: {out.stderr.strip()[-200:]}")
    info = json.loads(out.stdout)
    if tuple(info["version"]) != sys.version_info[:2]:
        fail(2, f"the node's Python {python} is {'.'.join(map(str, info['version']))}, the env's is "
                f"{sys.version.split()[0]}: run tox with the node's Python (pip install tox there) "
                f"or set HICACHE_NODE_PYTHON")
    prefix = os.path.realpath(sys.prefix)
    target = os.path.join(sysconfig.get_paths()["purelib"], PTH)
    linked = set()
    if os.path.exists(target):  # a rerun: what the last run linked is on sys.path through it
        with open(target) as f:
            linked = {os.path.realpath(ln.strip()) for ln in f if ln.strip()}
    have = {os.path.realpath(p) for p in sys.path if p} - linked
    extra = [p for p in info["sites"] if os.path.realpath(p) not in have
             and not os.path.realpath(p).startswith(prefix + os.sep)]
    with open(target + ".tmp", "w") as f:
        f.write("".join(p + "\n" for p in extra))
    os.replace(target + ".tmp", target)
    print(f"node Python {python}: {len(extra)} site-packages dir(s) added to the env: {extra}", flush=True)


def node_torch(python_for_message: str) -> tuple[str, str]:
    out = subprocess.run([sys.executable, "-c", TORCH], capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        fail(2, f"torch is not importable from the node's Python {python_for_message} ({last}): install "
                f"the node's torch there first (docs/acceptance.md, section 0); this env never installs one")
    version, where = json.loads(out.stdout)
    if os.path.realpath(where).startswith(os.path.realpath(sys.prefix) + os.sep):
        fail(2, f"torch {version} is installed inside the env ({where}), not the node's: recreate it "
                f"(tox -r -e {os.environ.get('TOX_ENV_NAME', '?')})")
    return version, where


def requirements() -> list[str]:
    """The installed harness's requirements (those of EXTRAS too), torch's left out."""
    wanted = []
    for req in metadata.requires(DIST) or []:
        spec, _, marker = req.partition(";")
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if extra and extra.group(1) not in EXTRAS:
            continue
        if re.match(r"[A-Za-z0-9_.-]+", spec.strip()).group(0).lower() == "torch":
            continue
        wanted.append(spec.strip())
    return wanted


def pip(what: str, *args: str) -> None:
    if subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args]).returncode != 0:
        fail(2, f"pip could not install {what} (pip says why above); on a node without network install the "
                f"harness's requirements into the node's Python first (docs/acceptance.md, section 0)")


def main() -> None:
    python = node_python()
    link_node_sites(python)
    before = node_torch(python)
    with tempfile.TemporaryDirectory() as tmp:
        pin = os.path.join(tmp, "torch-pin.txt")
        with open(pin, "w") as f:
            f.write(f"torch=={before[0]}\n")
        # Without build isolation nothing is downloaded to build the harness (an offline node).
        isolation = []
        if subprocess.run([sys.executable, "-c", "import setuptools, sys; "
                           "sys.exit(int(setuptools.__version__.split('.')[0]) < 68)"]).returncode == 0:
            isolation = ["--no-build-isolation"]
        pip("the harness", "--no-deps", *isolation, "-c", pin, "-e", ROOT)
        pip("the harness's requirements", "-c", pin, *requirements())
    after = node_torch(python)
    if after != before:
        fail(1, f"installing the harness changed torch: {before[0]} ({before[1]}) -> {after[0]} ({after[1]})")
    print(f"torch {after[0]} from {os.path.dirname(after[1])}: the node's own, unchanged", flush=True)


if __name__ == "__main__":
    main()
