#!/usr/bin/env bash
# The GPU checks of the real-model backend, as one script, for a machine with CUDA (run from the repository root,
# with speculab importable beside the machine's own torch): the validation (laws, theory vs measured, speed) in
# float32 and a shorter one in bfloat16, the batched-decoding benchmark in both, the real-model tests (slow tier
# included) with their models on the GPU, and `speculab plan` on the tiny pair. Each step has its own time limit (STEP_LIMIT seconds, scaled per step), so one that hangs does
# not take the others with it. Everything lands in $OUT (eight files); the script exits 1 if any step failed.
# `python benchmarks/gpu_tables.py OUT` renders them for docs/measurements.md.
#
#   OUT=results-gpu bash benchmarks/gpu_check.sh
set -uo pipefail
OUT=${OUT:-results-gpu}
PY=${PYTHON:-python}
LIMIT=${STEP_LIMIT:-150}
DEVICE=${DEVICE:-cuda}
export HF_HUB_OFFLINE=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
mkdir -p "$OUT/bf16"
exec > >(tee "$OUT/log.txt") 2>&1
status=0
step() {  # step NAME LIMIT_SECONDS COMMAND...: run it, log it, and note its exit status and time
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  echo "== $name (limit ${limit} s): $*"
  timeout "$limit" "$@" 2>&1
  rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || status=1
}
step environment 60 "$PY" -c "import torch, transformers, numpy; print(torch.__version__, transformers.__version__,
numpy.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
step validate "$LIMIT" "$PY" -m speculab.cli validate --device "$DEVICE" --debug --out "$OUT"
step bench-float32 $((LIMIT * 2 / 3)) "$PY" benchmarks/bench_batched.py --device "$DEVICE" \
  --out "$OUT/float32"
# pytest-xdist, where installed (the GPU machines have it; `./dev`'s environment does not), runs the files at once
PARALLEL=$("$PY" -c "import xdist" 2>/dev/null && echo "-n 12")
step tests "$LIMIT" "$PY" -m pytest -q -p no:cacheprovider -p no:benchmark --runslow --device "$DEVICE" --maxfail 10 \
  $PARALLEL \
  tests/test_batched.py tests/test_drafts.py tests/test_streams.py tests/test_validate.py tests/test_backends.py \
  tests/test_block.py tests/test_specdecpp_models.py tests/test_sprinter_models.py tests/test_fsd_models.py \
  tests/test_latency.py
step validate-bfloat16 $((LIMIT * 2 / 5)) "$PY" -m speculab.cli validate --device "$DEVICE" --dtype bfloat16 --debug \
  --runs 4000 --compare-runs 0 --no-speed --out "$OUT/bf16"
step bench-bfloat16 $((LIMIT * 2 / 5)) "$PY" benchmarks/bench_batched.py --device "$DEVICE" --dtype bfloat16 \
  --repeats 2 --out "$OUT/bf16"
step plan "$LIMIT" "$PY" -m speculab.cli plan --pair tiny --device "$DEVICE" --out "$OUT"
rm -f "$OUT/plan.png" "$OUT/plan.pdf"  # gpu_tables.py draws the figure from plan.json
exit $status
