#!/usr/bin/env bash
# The GPU checks of the real-model backend, as one script, for a machine with CUDA (run from the repository root,
# with speculab installed beside the machine's own torch): the validation (laws, theory vs measured, speed), the
# batched-decoding benchmark, and the real-model tests with their models on the GPU. Everything lands in $OUT.
#
#   OUT=results-gpu bash benchmarks/gpu_check.sh
set -uo pipefail
OUT=${OUT:-results-gpu}
PY=${PYTHON:-python}
mkdir -p "$OUT"
status=0
"$PY" -m speculab.cli validate --device cuda --out "$OUT" | tee "$OUT/validate.txt" || status=1
"$PY" benchmarks/bench_batched.py --device cuda --json "$OUT/bench_batched.json" | tee "$OUT/bench_batched.txt" || status=1
"$PY" -m pytest -q -p no:cacheprovider --device cuda tests/test_batched.py tests/test_drafts.py tests/test_streams.py \
  tests/test_validate.py 2>&1 | tail -30 | tee "$OUT/pytest.txt" || status=1
exit $status
