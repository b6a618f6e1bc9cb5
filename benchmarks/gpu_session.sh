#!/usr/bin/env bash
# One lent GPU session's checks, in the order that makes the most of a few minutes (issue 36): the CUDA
# tests (results equal to the CPU's, no host sync inside the loops), a minute of differential fuzzing of the
# graph path against the native engine (fuzz_differential.py --only graphs --device cuda), the timing table (benchmarks/gpu.py,
# with the compiled-graph rows: their "identical" column is the first word on compiled exactness), the
# compiled rounds round by round against eager on CUDA (the lockstep tests: which round leaves eager's),
# then the kernel profiles of the eager and the compiled rounds inside the graphs.
#
#   bash benchmarks/gpu_session.sh [budget seconds for gpu.py, default 240]
#   QUICK=1 bash benchmarks/gpu_session.sh 60      # small sizes (a smoke run; on a CPU the CUDA tests skip)
#   BISECT=1 bash benchmarks/gpu_session.sh        # also bisect the first failing compiled lockstep test
#   TABLE_SECTIONS=greedy,beam,ctc,wfst,compiled bash benchmarks/gpu_session.sh   # greedy rows too
#   STAGES=lockstep,profile,profile_compiled bash benchmarks/gpu_session.sh   # some stages (a second call:
#                                                  # one device call runs at most 10 minutes)
#
# Logs and tables go to $OUT (the device tool's folder that comes back) or work/gpu-session. Each stage
# runs whatever the one before gave (a failing test does not stop the timing), and says how long it took.
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${OUT:-work/gpu-session}"
mkdir -p "$OUT_DIR"
BUDGET="${1:-240}"
PY="${PYTHON:-python3}"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1

stage() {  # stage NAME COMMAND...: run, log to $OUT_DIR/NAME.log, print the tail and the time
    local name="$1"; shift
    local t0=$SECONDS
    echo "== $name: $*"
    "$@" > "$OUT_DIR/$name.log" 2>&1
    local rc=$?
    tail -n 15 "$OUT_DIR/$name.log"
    echo "== $name: exit $rc in $((SECONDS - t0)) s"
}

SIZE=()
[ -n "${QUICK:-}" ] && SIZE=(--quick)
STAGES=",${STAGES:-tests,fuzz,table,lockstep,profile,profile_compiled},"
want() { [[ "$STAGES" == *",$1,"* ]]; }
$PY -c "import torch; print(torch.__version__, torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')" | tee "$OUT_DIR/device.txt"
want tests && stage cuda_tests $PY -m pytest -q -p no:cacheprovider -m cuda tests/ctc/test_cuda_ctc.py \
    tests/transducer/test_cuda_beam.py tests/transducer/test_cuda_greedy.py
# the graph path on real CUDA graphs against the native engine, random cases (one decoder object, calls of changing
# shapes, some streamed; the CPU runs the same entry on emulated graphs): FUZZ_MINUTES, default 1
want fuzz && stage fuzz_graphs env PYTHONPATH="src:tests" $PY benchmarks/fuzz_differential.py --only graphs \
    --device cuda --minutes "${FUZZ_MINUTES:-1}"
# (greedy met its targets in run 6: TABLE_SECTIONS=greedy,beam,ctc,wfst,compiled times it again; without it the
# budget goes to the compiled rows, which run last, in the order of the unmet targets)
want table && stage gpu_table $PY benchmarks/gpu.py --budget-s "$BUDGET" --sections "${TABLE_SECTIONS:-beam,ctc,wfst,compiled}" \
    --repeats 6 --compiled-graphs --out-dir "$OUT_DIR" "${SIZE[@]}"
if want lockstep; then
    stage compile_lockstep $PY -m pytest -q -p no:cacheprovider -m slow tests/app/test_compile_exact.py -k cuda -x
    # BISECT=1 and a failing lockstep test: Inductor's bisector finds the pass or lowering that breaks it
    # (minutes: one compile per step); the backend it tests reaches the library through TORCH_COMPILE_BACKEND
    FIRST_FAIL=$(grep -o '^FAILED [^ ]*' "$OUT_DIR/compile_lockstep.log" | head -n 1 | cut -d' ' -f2)
    if [ -n "${BISECT:-}" ] && [ -n "$FIRST_FAIL" ]; then
        stage bisect $PY -m torch._inductor.compiler_bisector run $PY -m pytest -q -x -p no:cacheprovider -m slow "$FIRST_FAIL"
    fi
fi
want profile && stage profile $PY benchmarks/gpu_profile.py --out-dir "$OUT_DIR" "${SIZE[@]}"
# the compiled rounds' kernels (CUDA only: gpu_profile.py refuses --compiled on a CPU)
want profile_compiled && stage profile_compiled $PY benchmarks/gpu_profile.py --compiled --out-dir "$OUT_DIR" "${SIZE[@]}"
echo "== stages done: ${STAGES//,/ }"
