#!/usr/bin/env bash
# The device check: everything an acceptance run needs from one GPU/XPU machine, into one folder.
#
#   ci/device-check.sh [--backend cuda|xpu|emu] [--profile P] [--quick] OUTDIR
#
# Steps (each with its own time limit, so the whole check ends within ~8 minutes):
#   preflight  (xpu) refuses, one line naming the variable, with XPU_DUMMY_EVENT set, unequal
#              XPU_/CUDA_VISIBLE_DEVICES, no or two libxpurt mapped, or torch's device order not xpu-smi's
#   env        hicache/torch versions, nvidia-smi / xpu-smi inventory when present, the stack's
#              versions and mapped runtime (xpu)                                     -> env.txt
#   backends   hicache backends --json                                             -> backends.json
#   doctor     hicache doctor --backend B --profile P --json                        -> doctor.json
#   calibrate  hicache calibrate ... (skipped, saying so, where the build has no such subcommand)
#                                                          -> calibrate.json, calibrated-profile.yaml
#   conform    hicache conform --backend B --profile P --out OUTDIR/conform         -> conform/
#   bench-*    hicache bench transfer --backend B in each copy mode the backend has -> bench-transfer-MODE.json
# and writes OUTDIR/device-check.json (each step: exit code, seconds, files) and OUTDIR/summary.txt.
#
# Needs no network: nothing is installed or downloaded (pip and hub lookups are switched off).
# `--backend emu` is the dry run: the same steps on this CPU (no copy modes: one benchmark).
# `--quick` shrinks the conformance selection and benchmark sizes (the harness's own test).
# Exit: 0 conform passed and every step ran; 1 a step failed or timed out; 2 bad arguments or a
# preflight refusal (nothing written);
# 3 conform NOT RUN (the backend is unavailable here); 4 conform PARTIAL (its deciding suites ran
# only in part, as with --quick's selection: no sign-off). doctor/calibrate/bench findings (their
# exit 1) are reported in the summary, not turned into a failure of the check.
set -uo pipefail

die() { echo "device-check: $1" >&2; exit 2; }

backend=cuda profile="" quick=0 out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --backend) [ $# -ge 2 ] || die "--backend: expects cuda, xpu or emu"; backend="$2"; shift 2 ;;
        --backend=*) backend="${1#*=}"; shift ;;
        --profile) [ $# -ge 2 ] || die "--profile: expects a profile name or YAML path"; profile="$2"; shift 2 ;;
        --profile=*) profile="${1#*=}"; shift ;;
        --quick) quick=1; shift ;;
        -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        -*) die "$1: unknown option (see --help)" ;;
        *) [ -z "$out" ] || die "$1: one OUTDIR only (already $out)"; out="$1"; shift ;;
    esac
done
if [ $# -gt 0 ]; then
    { [ -z "$out" ] && [ $# -eq 1 ]; } || die "${*:0:80}: unexpected arguments"
    out="$1"
fi
case "$backend" in cuda|xpu|emu) ;; *) die "--backend: '${backend:0:40}' is not cuda, xpu or emu" ;; esac
[ -n "$out" ] || die "OUTDIR: missing (usage: ci/device-check.sh [--backend cuda|xpu|emu] [--profile P] OUTDIR)"
if [ -z "$profile" ]; then
    case "$backend" in cuda) profile=h200 ;; xpu) profile=p800 ;; emu) profile=p800 ;; esac
fi
# Preflight of the Kunlun stack (hal.backends.support.kunlun_stack), before anything is written or
# timed: XPU_DUMMY_EVENT unset, XPU_VISIBLE_DEVICES = CUDA_VISIBLE_DEVICES and, on an XPU node, one
# mapped libxpurt and torch's device order = xpu-smi's. Each refusal is one line naming the variable.
stack=""
if [ "$backend" = xpu ]; then
    preflight=$("${PYTHON:-python}" -c '
import json
from hal.backends.xpu import XpuBackend
refusals, stack = XpuBackend.preflight()
print("\n".join(["STACK " + json.dumps(stack)] + ["REFUSE " + r for r in refusals]))' 2>&1) ||
        die "preflight: $(printf '%s' "$preflight" | tail -1)"
    stack=$(printf '%s\n' "$preflight" | sed -n 's/^STACK //p')
    if printf '%s\n' "$preflight" | grep -q '^REFUSE '; then
        printf '%s\n' "$preflight" | sed -n 's/^REFUSE /device-check: /p' >&2
        exit 2
    fi
fi
if [ -e "$out" ] && { [ ! -d "$out" ] || [ -n "$(ls -A "$out" 2>/dev/null)" ]; }; then
    die "OUTDIR: $out exists and is not an empty folder (one check per folder)"
fi
mkdir -p "$out" || die "OUTDIR: cannot create $out"
out="$(cd "$out" && pwd)"

# No network: nothing below may install or fetch.
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PYTHON="${PYTHON:-python}"
if [ -n "${HICACHE:-}" ]; then read -r -a hicache <<< "$HICACHE"
elif command -v hicache >/dev/null 2>&1; then hicache=(hicache)
else hicache=("$PYTHON" -m conformance.cli.main)
fi

# Per-step limits in seconds (sum: 480 s = 8 min at worst).
T_ENV=10 T_BACKENDS=20 T_DOCTOR=30 T_CALIBRATE=90 T_CONFORM=150 T_BENCH_DESCRIPTOR=120 T_BENCH_GATHER=60
if [ "$quick" = 1 ]; then
    conform_sel=(-n 0 -k "mla-ps16-bf16-128")
    bench_size=(--tokens 256 --layers 2 --kv-dim 64 --page-size 16 --repeat 1)
    calibrate_size=(--sizes 1MiB,2MiB --repeat 3)
else
    conform_sel=() bench_size=(--repeat 3) calibrate_size=()
fi

steps="$out/steps.tsv"
: > "$steps"
# run_step NAME LIMIT STDOUT_FILE CMD...: stdout to the file, stderr to NAME.log, a row in steps.tsv
run_step() {
    local name="$1" limit="$2" file="$3"; shift 3
    local t0 rc
    t0=$(date +%s)
    echo "device-check: $name ..." >&2
    timeout --signal=INT --kill-after=10 "$limit" "$@" > "$out/$file" 2> "$out/$name.log"
    rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$file" >> "$steps"
    [ "$rc" = 124 ] && echo "device-check: $name: timed out after ${limit} s" >&2
    return 0
}
skip_step() { printf '%s\tskipped\t0\t%s\n' "$1" "$2" >> "$steps"; echo "device-check: $1: skipped: $2" >&2; }

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -n) $(uname -r)"
    echo "backend: $backend  profile: $profile  quick: $quick"
    echo "hicache: $("${hicache[@]}" --version 2>&1)"
    "$PYTHON" -c 'import torch; print("torch:", torch.__version__, "cuda build:", torch.version.cuda)' 2>&1
    command -v nvidia-smi >/dev/null && timeout "$T_ENV" nvidia-smi -L 2>&1
    command -v xpu-smi >/dev/null && timeout "$T_ENV" xpu-smi 2>&1 | head -40
    [ -n "$stack" ] && echo "stack: $stack"  # python, torch, torch_xmlir, vendor ops, driver, mapped libxpurt
} > "$out/env.txt" 2>&1

run_step backends "$T_BACKENDS" backends.json "${hicache[@]}" backends --json
run_step doctor "$T_DOCTOR" doctor.json "${hicache[@]}" doctor --backend "$backend" --profile "$profile" --json
if "${hicache[@]}" calibrate --help > /dev/null 2>&1; then
    run_step calibrate "$T_CALIBRATE" calibrate.json "${hicache[@]}" calibrate --backend "$backend" \
        --profile "$profile" --out "$out/calibrated-profile.yaml" "${calibrate_size[@]}" --json --quiet
else
    skip_step calibrate "this hicache has no calibrate subcommand"
fi
run_step conform "$T_CONFORM" conform.txt "${hicache[@]}" conform --backend "$backend" --profile "$profile" \
    --out "$out/conform" "${conform_sel[@]}"

# One benchmark per copy mode the backend offers (none on emu: one run).
modes=$("$PYTHON" - "$out/backends.json" "$backend" <<'EOF'
import json, sys
try:
    rows = {r["name"]: r for r in json.load(open(sys.argv[1]))["backends"]}
    print(" ".join(rows[sys.argv[2]]["copy_modes"]))
except Exception:
    pass
EOF
)
if [ -z "$modes" ]; then
    run_step bench-transfer "$T_BENCH_GATHER" bench-transfer.json "${hicache[@]}" bench transfer \
        --backend "$backend" --profile "$profile" "${bench_size[@]}" --json --quiet
else
    for mode in $modes; do
        limit=$T_BENCH_GATHER; [ "$mode" = descriptor ] && limit=$T_BENCH_DESCRIPTOR
        run_step "bench-transfer-$mode" "$limit" "bench-transfer-$mode.json" "${hicache[@]}" bench transfer \
            --backend "$backend" --profile "$profile" --copy-mode "$mode" "${bench_size[@]}" --json --quiet
    done
fi

# The report: device-check.json and summary.txt; the exit status from the conformance verdict.
"$PYTHON" - "$out" "$backend" "$profile" <<'EOF'
import json, sys
from pathlib import Path

out, backend, profile = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
# Exit 1 of these is a finding (a failed doctor check, a missed target), not a broken check.
FINDINGS_OK = ("doctor", "calibrate", "bench-transfer")
steps = []
for line in (out / "steps.tsv").read_text().splitlines():
    name, rc, secs, file = line.split("\t")
    steps.append({"step": name, "exit": None if rc == "skipped" else int(rc), "seconds": int(secs),
                  "file" if rc != "skipped" else "reason": file})
conform = next((s for s in steps if s["step"] == "conform"), {"exit": None})
summary_path = out / "conform" / "summary.json"
verdict = json.loads(summary_path.read_text()).get("verdict") if summary_path.exists() else None
broken = [s["step"] for s in steps if s["exit"] not in (None, 0)
          and not (s["exit"] == 1 and s["step"].startswith(FINDINGS_OK))
          and not (s["exit"] == 4 and s["step"] == "conform")]  # PARTIAL: a verdict, not a broken step
if conform["exit"] == 3:
    status, code = "NOT RUN", 3
elif conform["exit"] == 4 and not broken:
    status, code = "PARTIAL", 4
elif broken or conform["exit"] != 0:
    status, code = "FAIL", 1
else:
    status, code = "PASS", 0
report = {"backend": backend, "profile": profile, "status": status, "conform_verdict": verdict,
          "failed_steps": broken, "steps": steps,
          "note": "findings: doctor checks with status fail, benchmark targets missed (see their files)"}
(out / "device-check.json").write_text(json.dumps(report, indent=2) + "\n")
lines = [f"device check: {status} (backend {backend}, profile {profile}; conform verdict {verdict})"]
for s in steps:
    state = "skipped: " + s["reason"] if s["exit"] is None else f"exit {s['exit']}, {s['seconds']} s -> {s['file']}"
    lines.append(f"  {s['step']:<26}{state}")
(out / "summary.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(code)
EOF
