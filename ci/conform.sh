#!/usr/bin/env bash
# Conformance against one backend and profile; skips with the backend's stated reason when
# its hardware is absent (exit 0), fails on any failing check.
set -euo pipefail
backend="${1:?usage: ci/conform.sh BACKEND [PROFILE] [extra hicache conform args]}"
profile="${2:-}"
shift $(( $# >= 2 ? 2 : 1 ))
out="${HICACHE_REPORT_DIR:-reports}/conform-${backend}${profile:+-$profile}"
exec hicache conform --backend "$backend" ${profile:+--profile "$profile"} --out "$out" "$@"
