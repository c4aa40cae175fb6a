#!/usr/bin/env bash
# The P800 software stacks' Python: for each torch of PY310_TORCH (sglang-kunlun ships 2.9.0,
# vLLM-Kunlun 2.5.1), builds (or reuses) a Python 3.10 venv with that torch, installs the harness
# the runbook's way (pip install --no-deps -e . into an environment that already has torch), then
# runs the HAL/conformance tests and the TP group's there. `hicache conform --backend emu --profile
# p800` must PASS with the same summary as on this machine's default Python (summary.json's verdict,
# answer, target counts, model verdict, failures).
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

    out="$work/torch$TORCH"
    "$VENV/bin/hicache" conform --backend emu --profile p800 --out "$out" >"$out.txt" || {
        cat "$out.txt"; echo "ci/test-py310.sh: conform on Python 3.10 + torch $TORCH did not PASS" >&2; exit 1; }
    "$V" - "$out/summary.json" "$work/default/summary.json" "$TORCH" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
# The figures and verdicts; test counts and skip reasons follow what each environment has installed.
FIGURES = ("verdict", "answer", "target_counts", "model_verdict", "failures")
keys = [k for k in FIGURES if a.get(k) != b.get(k)]
if keys:
    sys.exit(f"ci/test-py310.sh: conform's figures differ between Python 3.10 + torch {sys.argv[3]} "
             f"and the default Python: {keys}")
print(f"conform on Python 3.10 + torch {sys.argv[3]}: {a['verdict']}, the same figures as on the default Python")
PYEOF
    "$V" -m pytest -q -n 2 -p no:cacheprovider \
        tests/hal/test_direction.py tests/hal/test_backend_contract.py tests/hal/test_kvcacheio.py tests/hal/test_plan.py \
        tests/hal/test_memory.py tests/hal/test_memory_refusals.py tests/hal/test_host_registration.py \
        tests/hal/test_vendor_ops.py tests/hal/test_xpu_standin.py tests/conformance/test_doctor_preflight.py \
        tests/conformance/test_conform_summary.py tests/tp/test_tp_group.py "$@"
done
