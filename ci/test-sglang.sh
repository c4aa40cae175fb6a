#!/usr/bin/env bash
# The tests that need SGLang itself (marker needs_sglang: the differential suite, the sglang engine,
# storage interoperability with SGLang's own clients), in an environment of their own: SGLang 0.5.23
# imports on torch 2.14.1 + torchvision 0.29.1 (ci/install-sglang.sh says why), where the main test
# environment keeps torch 2.13.0. Creates (or reuses) the venv in $SGLANG_VENV (default .venv-sglang).
# One pytest worker: each would import SGLang again (about a minute on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SGLANG_VENV:-.venv-sglang}
# Reuse a whole venv; one cut short (no pip in it) is made again.
"$VENV/bin/python" -m pip --version >/dev/null 2>&1 || python -m venv --clear "$VENV"
PYTHON="$VENV/bin/python" ci/install-sglang.sh -q
"$VENV/bin/python" -m pip install -q -e '.[test,mooncake]'
exec "$VENV/bin/python" -m pytest -q -m needs_sglang -p no:cacheprovider "$@"
