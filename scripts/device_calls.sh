#!/usr/bin/env bash
# One device call of a session's plan: several device_sweep.sh parts, each under its own time limit
# and into its own folder, so that a part cut at its limit still leaves the others' logs; everything
# comes back as one archive ($OUT/calls.tgz, the device tool returns few files) plus the summary log.
#
#   CALL=head   bash scripts/device_calls.sh   # head tests natively, the 1.7B training step (rlk, recompute, Liger),
#                                              # the q/k launch, dQ and RMSNorm tests (carry .wheels)
#   CALL=head2  bash scripts/device_calls.sh   # the head's tests (8B contract, rows, kept probabilities), the
#                                              # training step (rlk, Liger), the head sweep (carry .wheels)
#   CALL=engine bash scripts/device_calls.sh   # the 8B engine against stock vLLM (carry .vllm-cuda)
set -uo pipefail
ROOT_OUT="$OUT"
part() {  # part NAME SECONDS VAR=VALUE...: one device_sweep.sh run in $ROOT_OUT/NAME
    local name=$1 secs=$2
    shift 2
    mkdir -p "$ROOT_OUT/$name"
    echo "=== $name (limit ${secs}s, $(date -u +%T))"
    env OUT="$ROOT_OUT/$name" "$@" timeout "$secs" bash scripts/device_sweep.sh > "$ROOT_OUT/$name.log" 2>&1
    echo "exit $?"
    grep -E "passed|failed|error|tok/s|ratio|FAILED|Error" "$ROOT_OUT/$name.log" | tail -25
}
case "${CALL:-head}" in
head)
    part head_tests 150 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/gpu/test_triton_contract_8b.py" K=head
    part train 260 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,rlk_recompute,liger --profile --limit 120"
    tail -30 "$ROOT_OUT/train.log"
    part qk_dq_tests 150 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/gpu/test_triton_contract_8b.py" \
        K="rowwise or paged_runner or attention_backward or qk or rms" TEST_TIMEOUT=140
    ;;
head2)
    part head_8b 150 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/gpu/test_triton_contract_8b.py" \
        K="head_rows or kept_probs or keeps_probs or logprob_head_rows or head_graphs"
    part train 200 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 90"
    tail -30 "$ROOT_OUT/train.log"
    part head_sweep 180 PART=sweep SKIP_ATTN=1 SKIP_OPS=1 SKIP_MATMUL=1
    ;;
engine)
    part engine_8b 500 PART=vllm SHAPE=8b ENGINES=stock,rlk VLLM_ARGS="--limit 190"
    tail -40 "$ROOT_OUT/engine_8b.log"
    ;;
*) echo "unknown CALL ${CALL}"; exit 2 ;;
esac
rm -rf "$ROOT_OUT"/*/cache
tar czf /tmp/calls.tgz -C "$ROOT_OUT" . && rm -rf "${ROOT_OUT:?}"/* && mv /tmp/calls.tgz "$ROOT_OUT/"
