#!/usr/bin/env bash
# The P800 software stacks' Python: for each torch of PY310_TORCH (sglang-kunlun ships 2.9.0,
# vLLM-Kunlun 2.5.1), builds (or reuses) a Python 3.10 venv with that torch, installs the harness
# the runbook's way (pip install --no-deps -e . into an environment that already has torch), then
# runs ci/py310-check.sh there: conform on emu with p800 must PASS with the same figures as on this
# machine's default Python (the `hicache` on PATH), then the tests ci/py310-tests.txt lists.
# Environment: PY310 (the interpreter; default pyenv's 3.10), PY310_TORCH (default "2.9.0 2.5.1"),
# PY310_VENV (the first torch's venv, default .venv-py310; each further one is $PY310_VENV-torch<version>).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCHES=${PY310_TORCH:-2.9.0 2.5.1}
VENV0=${PY310_VENV:-.venv-py310}
PY=${PY310:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10*/bin/python 2>/dev/null | sort -V | tail -1)}
if [ -z "$PY" ] || ! "$PY" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then
    PY=$(command -v python3.10 || true)
fi
[ -n "$PY" ] || { echo "ci/test-py310.sh: PY310: no Python 3.10 here (pyenv's versions/3.10*, python3.10)" >&2; exit 2; }
for TORCH in $TORCHES; do
    [[ $TORCH =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "ci/test-py310.sh: PY310_TORCH: '$TORCH' is not a version like 2.9.0" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
hicache conform --backend emu --profile p800 --out "$work/default" >"$work/default.txt" || {
    cat "$work/default.txt"; echo "ci/test-py310.sh: conform on the default Python did not PASS" >&2; exit 1; }

first=1
for TORCH in $TORCHES; do
    if [ $first = 1 ]; then VENV=$VENV0; else VENV=$VENV0-torch$TORCH; fi
    first=0
    # Reuse a whole venv with the wanted torch; one cut short or on another torch is made again.
    if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH')" 2>/dev/null; then
        "$PY" -m venv --clear "$VENV"
        # PyPI's Linux wheels of torch 2.5.1 and 2.9.0 are CUDA builds: they import on a CPU-only
        # machine only with their nvidia-* libraries, so those come with them.
        "$VENV/bin/python" -m pip install -q "torch==$TORCH"
    fi
    V="$VENV/bin/python"
    # The runbook's path: the vendor's torch is already there, nothing may replace it.
    "$V" -m pip install -q "numpy>=1.26" "pyyaml>=6" "pytest>=8" "matplotlib>=3.7" "xxhash>=3" "scipy>=1.10" \
        "pytest-xdist>=3" "hypothesis>=6" "jsonschema>=4"
    "$V" -m pip install -q --no-deps -e .
    "$V" -c "import sys, torch, hal, conformance, hicache_ref; print('python', sys.version.split()[0], 'torch', torch.__version__)"

    PATH="$(cd "$VENV/bin" && pwd):$PATH" ci/py310-check.sh "$work/default/summary.json" "$@"
done
