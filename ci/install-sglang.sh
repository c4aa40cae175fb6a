#!/usr/bin/env bash
# Install the [sglang] extra into the active Python environment: SGLang 0.5.23 and the packages
# its HiCache imports, at the pinned versions, for `hicache replay --engine sglang` and the
# differential suite (conformance/suites/test_sglang_differential.py).
#
# Not through pip's resolver: sglang's declared requirements pull CUDA builds and pins that
# conflict with the harness's torch, and nothing on its HiCache path needs them. What it imports
# on a CPU box is torch 2.14.1 (sglang.srt.configs also imports torchvision, whose PyPI build
# fails beside torch 2.13.0+cpu: hence 2.14.1 + 0.29.1 together) plus the list in
# requirements/sglang-0.5.23.txt, installed with --no-deps.
# Use a separate environment from one pinned to torch 2.13.0 (CI's): this replaces its torch.
# Extra pip options (an --index-url, --find-links for local wheels) are passed through.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
"$PY" -m pip install "$@" torch==2.14.1 torchvision==0.29.1
"$PY" -m pip install "$@" --no-deps -r requirements/sglang-0.5.23.txt
"$PY" -c "from hicache_ref.engines.sglang.pin import unavailable_reason as u; import sys; r = u(); print(r or 'sglang engine: ready'); sys.exit(1 if r else 0)" \
  || { echo "install-sglang: SGLang installed but its HiCache does not import (see above)" >&2; exit 1; }
