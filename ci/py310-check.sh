#!/usr/bin/env bash
# One P800-stack environment's check: run with that environment's `python` and `hicache` first on
# PATH (tox's py310-* envs; ci/test-py310.sh for each of its venvs). `hicache conform --backend emu
# --profile p800` must PASS with the same figures as on the default Python (summary.json's verdict,
# answer, target counts, model verdict, failures), then the tests listed in ci/py310-tests.txt run.
# REFERENCE is the default Python's conform summary.json, or the default Python's `hicache`, which
# is then run to write one.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: ci/py310-check.sh REFERENCE [pytest args...] (REFERENCE: a summary.json or a hicache executable)"
ref="${1:?$usage}"
shift
if [ -f "$ref" ] && [ "${ref##*.}" = json ]; then
    ref_summary=$ref
elif [ -x "$ref" ] && [ ! -d "$ref" ]; then
    ref_summary=
else
    echo "ci/py310-check.sh: REFERENCE: '$ref' is neither a summary.json nor an executable hicache" \
         "(under tox: tox -e emu --notest makes the default one, or set HICACHE_REFERENCE)" >&2
    exit 2
fi
mapfile -t tests < <(grep -v -e '^#' -e '^[[:space:]]*$' ci/py310-tests.txt)
for t in "${tests[@]}"; do
    [ -f "$t" ] || { echo "ci/py310-check.sh: ci/py310-tests.txt: '$t' does not exist" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# tox signals this script alone, not its process group: each step runs as a child that gets
# SIGTERM when this script gets SIGINT, SIGTERM or SIGHUP (a background child ignores SIGINT), so
# none outlives the script.
child=
for sig in INT TERM HUP; do
    trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; wait "$child" || true; exit $((128 + $(kill -l '$sig')))' $sig
done
run() { "$@" & child=$!; wait "$child"; local rc=$?; child=; return "$rc"; }
if [ -z "$ref_summary" ]; then
    run "$ref" conform --backend emu --profile p800 --out "$work/default" >"$work/default.txt" || {
        cat "$work/default.txt"; echo "ci/py310-check.sh: conform with the reference $ref did not PASS" >&2; exit 1; }
    ref_summary=$work/default/summary.json
fi

stack=$(python -c "import sys, torch; print('Python', sys.version.split()[0], '+ torch', torch.__version__)")
python -c "import hal, conformance, hicache_ref"
run hicache conform --backend emu --profile p800 --out "$work/env" >"$work/env.txt" || {
    cat "$work/env.txt"; echo "ci/py310-check.sh: conform on $stack did not PASS" >&2; exit 1; }
python - "$work/env/summary.json" "$ref_summary" "$stack" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
# The figures and verdicts; test counts and skip reasons follow what each environment has installed,
# and a measured target's count this machine's state at that moment (its free memory, its load).
FIGURES = ("verdict", "answer", "target_counts", "model_verdict", "failures")
MODELED = ("modeled_pass", "modeled_fail", "reading_pass", "reading_fail", "reading_not_measured")
for s in (a, b):
    s["target_counts"] = {k: (s.get("target_counts") or {}).get(k) for k in MODELED}
keys = [k for k in FIGURES if a.get(k) != b.get(k)]
if keys:
    sys.exit(f"ci/py310-check.sh: conform's figures differ between {sys.argv[3]} and the default Python: {keys}")
print(f"conform on {sys.argv[3]}: {a['verdict']}, the same figures as on the default Python")
PYEOF
run python -m pytest -q -n 2 -p no:cacheprovider "${tests[@]}" "$@"
