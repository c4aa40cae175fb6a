#!/usr/bin/env bash
# The harness's own tests plus the conformance suite on emu: what CI and `tox -e emu` run.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -n auto "$@"
