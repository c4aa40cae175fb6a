#!/usr/bin/env bash
# Mutation testing of the modules that decide verdicts (mutmut 3): each module is mutated alone,
# against a few seconds of the tests that guard it, in a scratch copy of the checkout (mutmut
# writes mutants/ beside the sources). Prints each module's kill rate (of the mutants its tests
# reach; the unreached are counted apart) and the total; fails when the total is below MIN_KILL_PERCENT. The survivors judged equivalent: ci/mutation-survivors.md.
#
#   ci/mutation.sh                 every module below
#   ci/mutation.sh cost policy     only these (by the names below)
#
# Env: MUTATION_DIR (scratch, default /tmp/hicache-mutation), MIN_KILL_PERCENT (default 90),
# MUTATION_NICE (default 19: the run is long and should yield to everything else).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRATCH=${MUTATION_DIR:-/tmp/hicache-mutation}
MIN=${MIN_KILL_PERCENT:-90}
NICE=${MUTATION_NICE:-19}
command -v mutmut >/dev/null || { echo "ci/mutation.sh: mutmut is not installed (pip install 'mutmut>=3.8')" >&2; exit 2; }

# name | module mutated | pytest selection (test files, then -k ...): keep each to seconds, mutmut reruns it per mutant
MODULES=(
  "summary|conformance/report/summary.py|tests/conformance/test_conform_cli.py tests/conformance/test_conform_summary.py -k deciding_suite|run_in_part|error_fails|conform_summary"
  "verdict|conformance/targets/verdict.py|tests/conformance/test_target_verdicts.py -k judge|describe|without_a_backend|slower_directions"
  "link|conformance/targets/link.py|tests/conformance/test_target_verdicts.py -k slower_directions|without_a_backend|probe_figures"
  "digest|hicache_ref/tp/digest.py|tests/tp/test_tp_protocol.py tests/tp/test_tp_mutants.py -k not test_gate_ and not test_report_ and not test_rank_cache_"
  "visibility|hicache_ref/tp/visibility.py|tests/tp/test_tp_protocol.py tests/tp/test_tp_mutants.py -k gate|waits|private|writes"
  "rank_cache|hicache_ref/tp/rank_cache.py|tests/tp/test_tp_protocol.py tests/tp/test_tp_mutants.py -k not test_gate_ and not test_digest_ and not test_report_"
  "tp_report|hicache_ref/tp/report.py|tests/tp/test_tp_protocol.py tests/tp/test_tp_mutants.py -k report"
  "integrity|hicache_ref/storage/integrity.py|tests/storage/test_storage_mutants.py tests/storage/test_storage.py -k trailer|corrupt|digest"
  "storage_base|hicache_ref/storage/base.py|tests/storage/test_storage_mutants.py tests/storage/test_storage.py -k not atomic_overwrite"
  "layouts|hal/transfer/layout_registry.py|tests/hal/test_layout_registry.py"
  "plan|hal/transfer/plan.py|tests/hal/test_plan_mutants.py tests/hal/test_plan.py"
  "cost|hicache_ref/sim/cost.py|tests/sim/test_cost.py"
  "policy|hicache_ref/core/policy.py|tests/core/test_policy_mutants.py tests/core/test_policy.py"
)

want=("$@")
total_killed=0 total_all=0 rows=()
for entry in "${MODULES[@]}"; do
  name=${entry%%|*} rest=${entry#*|}
  module=${rest%%|*} selection=${rest#*|}
  if ((${#want[@]})) && [[ ! " ${want[*]} " =~ " $name " ]]; then continue; fi
  files=${selection%% -k *}
  keyword=""
  [[ $selection == *" -k "* ]] && keyword=$(sed 's/|/ or /g' <<<"${selection#* -k }")
  work=$SCRATCH/$name
  rm -rf "$work" && mkdir -p "$work"
  git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$work"
  # this module only, these tests only (the base settings: pyproject.toml's [tool.mutmut])
  python - "$work/pyproject.toml" "$module" "$files" "$keyword" <<'EOF'
import json, sys
path, module, files, keyword = sys.argv[1:]
selection = files.split() + (["-k", keyword] if keyword else [])
text = open(path).read().replace("[tool.mutmut]\n", "[tool.mutmut]\n"
    f"only_mutate = {json.dumps([module])}\npytest_add_cli_args_test_selection = {json.dumps(selection)}\n", 1)
open(path, "w").write(text)
EOF
  start=$(date +%s)
  # PYTHONPATH would put a checkout ahead of mutants/: the mutants would never be imported.
  # One torch thread: mutmut forks a child per mutant from a process whose torch thread pool is
  # already up, and a large copy in the child then waits forever on the pool's dead threads
  # (no CPU burnt, so mutmut's CPU limit never ends it)
  (cd "$work" && env -u PYTHONPATH OMP_NUM_THREADS=1 nice -n "$NICE" mutmut run --max-children 1 >"$work/mutmut.log" 2>&1 \
     && env -u PYTHONPATH mutmut export-cicd-stats >/dev/null \
     && env -u PYTHONPATH mutmut results --all true >"$work/survivors.txt") \
    || { echo "$name: mutmut failed (log: $work/mutmut.log)" >&2; exit 1; }
  # killed (a timeout or a crash is a kill too) of the mutants the selection reaches; those no selected
  # test reaches (mutmut's "no tests": code the selection does not cover) are counted apart, not as kills
  read -r killed reached unreached < <(python -c "import json,sys; s=json.load(open(sys.argv[1]));
k=s['killed']+s['timeout']+s['segfault']; print(k, s['total']-s['no_tests']-s['skipped'], s['no_tests'])" \
    "$work/mutants/mutmut-cicd-stats.json")
  secs=$(( $(date +%s) - start ))
  pct=$(python -c "print(f'{100*$killed/max($reached,1):.1f}')")
  rows+=("$(printf '%-13s %-34s %4d/%-4d %6s%%  unreached %4d  %4ds' "$name" "$module" "$killed" "$reached" "$pct" \
            "$unreached" "$secs")")
  echo "${rows[-1]}"
  grep -E ': (survived|suspicious)$' "$work/survivors.txt" | sed 's/^/    /' || true  # mutmut show NAME: the diff
  total_killed=$((total_killed + killed)) total_all=$((total_all + reached))
done
echo "--"
printf '%s\n' "${rows[@]}"
pct=$(python -c "print(f'{100*$total_killed/max($total_all,1):.1f}')")
echo "total: $total_killed/$total_all reached mutants killed ($pct%), minimum $MIN%"
python -c "import sys; sys.exit(0 if 100*$total_killed >= $MIN*max($total_all,1) else 1)" \
  || { echo "ci/mutation.sh: kill rate $pct% is below $MIN%: kill the new survivors or list them in ci/mutation-survivors.md" >&2; exit 1; }
