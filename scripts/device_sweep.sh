#!/usr/bin/env bash
# One device call: the Triton sweeps on the lent H200 (no install there: its image has torch,
# triton and transformers; this repo is imported from the working tree). Logs go to $OUT.
# SKIP_ATTN / SKIP_MATMUL / SKIP_OPS / SKIP_HEAD=1 leave a sweep out; ATTN_ARGS are passed on.
set -uo pipefail
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 RLK_CACHE_DIR="$OUT/cache"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "from rlk_models.ops.selftest import self_test; print('selftest triton:', self_test('triton', use_cache=False))" \
  2>&1 | tee "$OUT/selftest.log"
[ "${SKIP_ATTN:-0}" = 1 ] || python3 benchmarks/triton/attention_sweep.py ${ATTN_ARGS:-} 2>&1 | tee "$OUT/attention_sweep.log"
[ "${SKIP_OPS:-0}" = 1 ] || python3 benchmarks/triton/ops_sweep.py 2>&1 | tee "$OUT/ops_sweep.log"
[ "${SKIP_HEAD:-0}" = 1 ] || python3 benchmarks/triton/head_sweep.py 2>&1 | tee "$OUT/head_sweep.log"
[ "${SKIP_MATMUL:-0}" = 1 ] || python3 benchmarks/triton/matmul_sweep.py "$@" 2>&1 | tee "$OUT/matmul_sweep.log"
