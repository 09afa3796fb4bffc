#!/usr/bin/env bash
# The GPU check in one command, for a bare machine with an NVIDIA GPU and no network.
#
#   bash benchmarks/gpu_check.sh [--out DIR] [--limit SECONDS] [--python PY] [--wheels DIR] [--quick] [--force]
#
# From the repository root (or anywhere: it finds the root from its own path):
#   1. installs what refattn needs and the image lacks (autograd, say) from the
#      wheels in --wheels (default benchmarks/wheels, ignored by git; how to
#      fill it: benchmarks/README.md), into a temporary folder on PYTHONPATH;
#   2. machine:   the GPU, driver, CUDA, CuPy, PyTorch and NumPy versions;
#   3. parity:    tests/test_gpu_parity.py (NumPy, the fake device and CuPy);
#   4. dense:     benchmarks/bench_gpu_attention.py at (8, 8, 1024, 64), float32 and
#                 float64: refattn on CuPy beside PyTorch CUDA eager attention
#                 and scaled_dot_product_attention, and refattn on NumPy;
#   5. streaming: streaming attention on CuPy at n = 16,384 and 65,536 beside SDPA;
#   6. nt:        refattn nt, 200 epochs, 16 seeds batched, --device gpu and cpu;
#   7. flex_tests: tests/core/test_flex.py's CUDA tests (every route on compiled
#                 FlexAttention, forward and backward, float64 and float32,
#                 against the textbook), each outcome in the log as it comes;
#   8. flex:      benchmarks/bench_flex.py --device cuda: every activation through
#                 FlexAttention beside SDPA and refattn.torch, float32, n = 4096,
#                 1024 and 16,384 (the JSON rewritten after every row);
# and writes DIR/gpu_check.json (every part, with each step's status) and
# DIR/gpu_check.log (everything printed). Each step runs in its own process
# under its own share of --limit (default 570 s); a step that fails or runs out
# of time is recorded as such and the next one runs (on an H100 the steps take
# about 9 minutes at most, which the default --limit fits in one 10-minute
# command). The JSON is written at the end in every case, also after SIGINT or
# SIGTERM. Without a GPU every GPU part
# is recorded as "no device" and the CPU side runs at smoke sizes.
# --quick: smoke sizes everywhere (seconds). Exit status: 0 when every step
# finished, 1 when one failed or ran out of time, 2 for bad options.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=gpu_check.sh
DEST=$ROOT/benchmarks/results/gpu_check
LIMIT=570
PY=python3
WHEELS=$ROOT/benchmarks/wheels
QUICK=0
FORCE=0
RESERVE=20  # seconds kept for writing the report

die() { echo "$PROG: $*" >&2; exit 2; }
while (($#)); do
    case $1 in
        --out) (($# >= 2)) || die "--out: expected a folder"; DEST=$2; shift 2 ;;
        --limit) (($# >= 2)) || die "--limit: expected a number of seconds"; LIMIT=$2; shift 2 ;;
        --python) (($# >= 2)) || die "--python: expected a Python interpreter"; PY=$2; shift 2 ;;
        --wheels) (($# >= 2)) || die "--wheels: expected a folder"; WHEELS=$2; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --force) FORCE=1; shift ;;
        -h|--help) sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
[[ $LIMIT =~ ^[0-9]+$ ]] && ((LIMIT >= 60)) || die "--limit: expected a whole number of seconds >= 60, got '$LIMIT'"
command -v "$PY" >/dev/null 2>&1 || die "--python: '$PY' is not a command here"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null || die "--python: '$PY' is not Python 3.10 or newer"
[[ -e $DEST && ! -d $DEST ]] && die "--out: '$DEST' exists and is not a folder"
mkdir -p "$DEST" 2>/dev/null && [[ -w $DEST ]] || die "--out: cannot write into '$DEST'"
DEST=$(cd "$DEST" && pwd)
if ((!FORCE)); then
    for f in gpu_check.json gpu_check.log; do
        [[ -e $DEST/$f ]] && die "--out: '$DEST/$f' exists; choose another folder or pass --force to replace it"
    done
fi
[[ -n ${WHEELS} && ( ! -e $WHEELS || -d $WHEELS ) ]] || die "--wheels: '$WHEELS' is not a folder"

DEADLINE=$((SECONDS + LIMIT))
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || die "cannot make a temporary folder"
LOG=$DEST/gpu_check.log
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
TEE=$!
finish() {  # close the log's pipe and let tee write its last lines before the script ends
    exec 1>&- 2>&-
    for _ in $(seq 100); do kill -0 "$TEE" 2>/dev/null || break; sleep 0.05; done
    exit "$1"
}
cd "$ROOT" || exit 1
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
echo "gpu_check: $(date -u +%FT%TZ), limit ${LIMIT} s, quick=$QUICK, results in $DEST"

# ---------------------------------------------------------------- the steps
CHILD=
STEP=
FAILED=0

status() {  # step status [exit seconds]
    printf '{"status": "%s", "exit": %s, "seconds": %s}\n' "$2" "${3:-null}" "${4:-null}" >"$WORK/$1.status.json"
}

report() {
    local rc
    "$PY" "$ROOT/benchmarks/gpu_check.py" assemble --work "$WORK" --out "$DEST/gpu_check.json" --limit "$LIMIT"
    rc=$?
    if ((rc == 0)); then echo "gpu_check: wrote $DEST/gpu_check.json and $LOG (steps' parts: $WORK)"
    else echo "gpu_check: could not write the report (exit $rc); the parts are in $WORK"; FAILED=1; fi
}

on_signal() {
    local sig=$1
    trap '' INT TERM HUP
    [[ -n $CHILD ]] && kill -TERM "$CHILD" 2>/dev/null && wait "$CHILD" 2>/dev/null
    [[ -n $STEP ]] && status "$STEP" "interrupted by SIG$sig"
    echo "gpu_check: SIG$sig: stopping; writing what was measured"
    report
    finish $((128 + $2))
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

# run_step NAME CAP COMMAND...: COMMAND under a time limit of CAP seconds, or what is left before the
# deadline, whichever is less; its outcome in $WORK/NAME.status.json.
run_step() {
    local name=$1 cap=$2 left rc t0
    shift 2
    left=$((DEADLINE - SECONDS - RESERVE))
    ((cap > left)) && cap=$left
    if ((cap < 5)); then
        status "$name" "not run: the time limit (--limit $LIMIT) was reached"
        echo "== $name: not run, no time left"; FAILED=1; return
    fi
    echo "== $name (at most ${cap} s)"
    STEP=$name; t0=$SECONDS
    timeout -k 5 "$cap" "$@" &
    CHILD=$!
    wait "$CHILD"; rc=$?
    CHILD=
    case $rc in
        0) status "$name" ok 0 $((SECONDS - t0)) ;;
        124|137) status "$name" "timed out after ${cap} s" "$rc" $((SECONDS - t0)); FAILED=1 ;;
        *) status "$name" "failed (exit $rc)" "$rc" $((SECONDS - t0)); FAILED=1 ;;
    esac
    echo "== $name: $(sed -n 's/.*"status": "\([^"]*\)".*/\1/p' "$WORK/$name.status.json") in $((SECONDS - t0)) s"
    STEP=
}

# ---------------------------------------------------------------- 1. what the image lacks
NEEDED="numpy autograd matplotlib threadpoolctl pytest hypothesis"
missing() {
    PYTHONPATH=${PYTHONPATH:-} "$PY" - $NEEDED <<'EOF'
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
EOF
}
SITE=$WORK/site
mkdir -p "$SITE"
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
MISSING=$(missing)
for m in $MISSING; do
    whl=$(ls "$WHEELS"/"$m"-*.whl 2>/dev/null | head -n 1)
    if [[ -n $whl ]]; then
        echo "setup: $m from $(basename "$whl")"
        "$PY" -m zipfile -e "$whl" "$SITE" || echo "setup: could not unpack $whl"
    fi
done
MISSING=$(missing)
if [[ -n $MISSING ]]; then
    echo "setup: still missing: $MISSING; put their wheels in $WHEELS (benchmarks/README.md, 'Without internet access')"
    status setup "failed: missing $MISSING"
    FAILED=1
else
    status setup ok
fi

# ---------------------------------------------------------------- 2-6. the steps
run_step machine 60 "$PY" benchmarks/gpu_check.py machine --out "$WORK/machine.json"
GPU=$("$PY" -c 'import json, sys; print(0 if json.load(open(sys.argv[1])).get("gpu_reason") else 1)' \
      "$WORK/machine.json" 2>/dev/null || echo 0)
echo "gpu_check: GPU present: $([[ $GPU == 1 ]] && echo yes || echo 'no (GPU parts recorded as no device)')"

if [[ -z $MISSING ]]; then
    run_step parity 150 "$PY" -m pytest tests/test_gpu_parity.py -q -p no:cacheprovider -rfEs \
        --junitxml="$WORK/parity.xml"

    if ((GPU && !QUICK)); then DENSE=(--size full)
    elif ((GPU)); then DENSE=(--size full --shape 1 2 128 32 --repeats 3 --cpu-repeats 1)
    else DENSE=(--size tiny); fi
    run_step dense 240 "$PY" benchmarks/bench_gpu_attention.py "${DENSE[@]}" --out "$WORK/dense.json"

    QFLAG=(); ((QUICK)) && QFLAG=(--quick)
    run_step streaming 150 "$PY" benchmarks/gpu_check.py streaming --out "$WORK/streaming.json" "${QFLAG[@]}"
    run_step nt 200 "$PY" benchmarks/gpu_check.py nt --out "$WORK/nt.json" "${QFLAG[@]}"

    run_step flex_tests 200 "$PY" -m pytest tests/core/test_flex.py -m "" -k cuda -v -p no:cacheprovider -rfEs \
        --junitxml="$WORK/flex_tests.xml"
    if ((GPU && !QUICK)); then FLEX=(--device cuda --dtypes float32 --ns 4096 1024 16384 --passes 2)
    elif ((GPU)); then FLEX=(--device cuda --dtypes float32 --ns 256 --activations softmax tanhmax linear --passes 1)
    else FLEX=(--quick --dtypes float32 --activations softmax tanhmax linear); fi
    run_step flex 150 "$PY" benchmarks/bench_flex.py "${FLEX[@]}" --out "$WORK/flex.json"
else
    for s in parity dense streaming nt flex_tests flex; do status "$s" "not run: setup failed (missing $MISSING)"; done
fi

report
((FAILED)) || rm -rf "$WORK"
finish $((FAILED ? 1 : 0))
