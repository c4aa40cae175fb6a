#!/usr/bin/env bash
# Conformance against one backend and profile, what tox's cuda and xpu envs run. The exit is
# conform's: 0 PASS, 1 FAIL, 3 NOT RUN (the backend is unavailable here: its reason is printed,
# nothing was tested; not a pass, not a failure), 4 PARTIAL. PROFILE is the second argument
# unless it starts with '-'; the rest go to `hicache conform` (tox -e cuda -- -k round_trip).
set -euo pipefail
backend="${1:?usage: ci/conform.sh BACKEND [PROFILE] [extra hicache conform args]}"
shift
profile=
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then profile=$1; shift; fi
name=${profile##*/}  # a profile given as a file names the folder by its stem
out="${HICACHE_REPORT_DIR:-reports}/conform-${backend}${profile:+-${name%.yaml}}"
exec hicache conform --backend "$backend" ${profile:+--profile "$profile"} --out "$out" "$@"
