#!/usr/bin/env bash
# One device call: the Triton sweeps on the lent H200 (no install there: its image has torch,
# triton and transformers; this repo is imported from the working tree). Logs go to $OUT.
set -uo pipefail
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
[ "${SKIP_MATMUL:-0}" = 1 ] || python3 benchmarks/triton/matmul_sweep.py "$@" 2>&1 | tee "$OUT/matmul_sweep.log"
[ "${SKIP_OPS:-0}" = 1 ] || python3 benchmarks/triton/ops_sweep.py 2>&1 | tee "$OUT/ops_sweep.log"
python3 benchmarks/triton/head_sweep.py 2>&1 | tee "$OUT/head_sweep.log"
