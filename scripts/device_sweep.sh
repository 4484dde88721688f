#!/usr/bin/env bash
# GPU work on the lent H200, one device call per part (a call runs at most 10 minutes); logs and
# JSON go to $OUT. No install from the network there: the image has torch, triton, transformers,
# pytest and hypothesis; vLLM 0.26 comes from ../shared/tools/vllm-cuda (bundle it into
# .vllm-cuda here and carry it: `run(..., carry=[".vllm-cuda"])`).
#
#   PART=tests  bash scripts/device_sweep.sh   # pytest -m gpu + the kernel/contract tests natively (TESTS, K: -k;
#                                              # XDIST=N: N pytest-xdist workers on the one GPU, for compile-bound
#                                              # kernel tests only: each vLLM engine test takes most of the GPU)
#   PART=vllm   bash scripts/device_sweep.sh   # benchmarks/vllm_cuda.py (SHAPE, ENGINES, TP, VLLM_ARGS)
#   PART=cold   bash scripts/device_sweep.sh   # the engine's start, Triton's cache cold / compiled ahead / warm
#                                              # (benchmarks/cold_start.py; SHAPE, COLD_ARGS)
#   PART=sweep  bash scripts/device_sweep.sh   # the Triton benchmarks (SKIP_ATTN/OPS/HEAD/MATMUL=1; ATTN_ARGS=--decode:
#                                              # paged decode at rollout shapes vs FA3; args -> matmul,
#                                              # OPS_ARGS=--search -> ops_sweep: the RMSNorm backward tilings)
#   PART=dscheck bash scripts/device_sweep.sh  # attention's kept dS against recomputed (NaN-filled buffer; DS_ARGS)
#   PART=halves bash scripts/device_sweep.sh   # row-parallel matmul with 2 K-groups, h0 stashed (HALVES_ARGS)
#   PART=norms  bash scripts/device_sweep.sh   # the decoder's norm launches, forward and backward, at a step's size
#                                              # vs copy bandwidth (norm_shapes.py; NORM_ARGS)
#   PART=fsdp   bash scripts/device_sweep.sh   # nvidia-h200-x2: FSDP2 checks over NCCL (rlk_models.testing.fsdp_check)
#                                              # and one GRPO step TP=2 rollout + FSDP2 (rlk_models.testing.grpo_tp2)
#   PART=grpo   bash scripts/device_sweep.sh   # the main job on the GPU: Qwen3-0.6B shape, SFT + rlk and stock GRPO
#   PART=push   bash scripts/device_sweep.sh   # a weight push into an in-process engine, by its parts, old and new
#                                              # (benchmarks/push_weights.py, PUSH_SHAPES: default "tiny 0.6b")
#   PART=trl    bash scripts/device_sweep.sh   # TRL GRPO + colocated vLLM, rlk vs stock (benchmarks/trl_grpo.py;
#       TRL_ARGS="--profile-step 5": that step's Python and GPU profile);
#       the image lacks trl, datasets, dill, multiprocess: carry them as wheels, made here with
#       pip download --no-deps --only-binary=:all: --python-version 3.12 -d .wheels \
#           trl==1.16.0 datasets==5.2.0 multiprocess==0.70.19 dill==0.4.1      (carry=[".vllm-cuda", ".wheels"])
#   PART=train  bash scripts/device_sweep.sh   # one training step, rlk vs stock SDPA vs Liger-Kernel, eager and
#       torch.compile (benchmarks/train_step.py; TRAIN_SHAPES="1.7b 8b", TRAIN_8B_LAYERS=4, TRAIN_ARGS); carry the
#       liger-kernel wheel in .wheels:
#           pip download --no-deps --only-binary=:all: -d .wheels liger-kernel==0.8.5
#   PART=verify bash scripts/device_sweep.sh   # rlk-verify at TP (default 2) on the tiny row-parallel-K variants
#       (VARIANTS="qwen3 llama_bias", CONFIGS=a,b,...; each line is printed as its engine finishes, so a call cut
#       at its limit still says which configurations held)
#   PART=fsdp,tests,vllm ...                   # several parts in one call, in order (one install)
set -uo pipefail
export PYTHONUNBUFFERED=1 RLK_CACHE_DIR="$OUT/cache" VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 \
       VLLM_NO_USAGE_STATS=1 TOKENIZERS_PARALLELISM=false
# PYTHONPATH_FIRST: a directory searched before this tree (e.g. .probe_old: an older rlk_models for an A/B call)
FIRST="${PYTHONPATH_FIRST:+$PYTHONPATH_FIRST:}"
export PYTHONPATH="$FIRST$PWD:${PYTHONPATH:-}"
if [ -f .vllm-cuda/install.sh ]; then
    bash .vllm-cuda/install.sh 2>&1 | tail -1
    # the project's dist-info carries the vllm.general_plugins entry point every vLLM process loads
    python3 -m pip install -q --no-deps --no-build-isolation --no-index --upgrade --target /tmp/site . 2>&1 | tail -1
    export PYTHONPATH="$FIRST$PWD:/tmp/site"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
# the host too: host-bound figures (batch-1 decode) move with the lent machine's CPU
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores" | tee -a "$OUT/gpu.txt"
IFS=, read -ra PARTS <<< "${PART:-tests}"
for part in "${PARTS[@]}"; do
echo "=== part $part ($(date -u +%T))"
case "$part" in
tests)
    # -v: the log names each test as it finishes (a call cut at its time limit still says which passed);
    # --timeout: one hung engine fails its test instead of eating the call (pytest-timeout is in the image);
    # XDIST: the kernel bits tests spend their time compiling (Triton, ptxas: one CPU core each), a test item a
    # worker compiles beside the others on the machine's 16 cores (pytest-xdist is in the image)
    python3 -m pytest -v -p no:cacheprovider -W ignore::DeprecationWarning --junitxml="$OUT/gpu_tests.xml" \
        --timeout "${TEST_TIMEOUT:-420}" ${XDIST:+-n "$XDIST"} \
        ${TESTS:-tests/gpu tests/ops/triton tests/ops/test_contract.py} ${K:+-k "$K"} 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
    ;;
vllm)
    # the 8B training step's checkpoints (~32 GB in /tmp/train_step) and the 8B engine's fill the 64 GiB disk
    # together (session 29: "No space left on device" converting): a machine runs one of them at a time
    rm -rf /tmp/train_step
    python3 benchmarks/vllm_cuda.py --shape "${SHAPE:-small}" --engines "${ENGINES:-stock,rlk,rlk_eager}" \
        --tp "${TP:-1}" ${VLLM_ARGS:-} 2>&1 | tee "$OUT/vllm_cuda_${SHAPE:-small}_tp${TP:-1}.log" | tail -60
    ;;
cold)
    # the engine's start where Triton's cache is empty, with the recorded kernel file compiled ahead, and warm
    # (benchmarks/cold_start.py: SHAPE, COLD_ARGS); the recorded file comes back as $OUT/kernels_<shape>.jsonl
    rm -rf /tmp/train_step
    python3 benchmarks/cold_start.py --shape "${SHAPE:-small}" ${COLD_ARGS:-} 2>&1 | tee "$OUT/cold_start.log" | tail -20
    ;;
sweep)
    python3 -c "from rlk_models.ops.selftest import self_test; print('selftest triton:', self_test('triton', use_cache=False))" \
        2>&1 | tee "$OUT/selftest.log"
    [ "${SKIP_ATTN:-0}" = 1 ] || python3 benchmarks/triton/attention_sweep.py ${ATTN_ARGS:-} 2>&1 | tee "$OUT/attention_sweep.log"
    [ "${SKIP_OPS:-0}" = 1 ] || python3 benchmarks/triton/ops_sweep.py ${OPS_ARGS:-} 2>&1 | tee "$OUT/ops_sweep.log"
    [ "${SKIP_HEAD:-0}" = 1 ] || python3 benchmarks/triton/head_sweep.py 2>&1 | tee "$OUT/head_sweep.log"
    [ "${SKIP_MATMUL:-0}" = 1 ] || python3 benchmarks/triton/matmul_sweep.py "$@" 2>&1 | tee "$OUT/matmul_sweep.log"
    ;;
dscheck)
    python3 benchmarks/triton/attention_ds_check.py ${DS_ARGS:-} 2>&1 | tee "$OUT/attention_ds_check.log" | tail -30
    ;;
norms)
    python3 benchmarks/triton/norm_shapes.py ${NORM_ARGS:-} 2>&1 | tee "$OUT/norm_shapes.log" | tail -20
    ;;
halves)
    python3 benchmarks/triton/matmul_halves_probe.py ${HALVES_ARGS:-} 2>&1 \
        | tee "$OUT/matmul_halves_probe.log" | tail -20
    ;;
fsdp)
    # a 2-layer Qwen3-8B-shaped checkpoint (triton backend); 2 ranks (NCCL), then 1 rank accumulating both
    python3 - <<'PY' 2>&1 | tail -2
import torch
from pathlib import Path
from rlk_models.conversion import convert
from rlk_models.testing.tiny import make_sized_hf_checkpoint
shape = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=2, num_attention_heads=32,
             num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=4096,
             tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
with torch.device("cuda"):
    hf = make_sized_hf_checkpoint(Path("/tmp/fsdp-hf"), "qwen3", shape)
convert(hf, Path("/tmp/fsdp-rlk"), rlk_backend="triton", force=True, progress=False)
PY
    python3 -m torch.distributed.run --nproc-per-node 2 -m rlk_models.testing.fsdp_check /tmp/fsdp-rlk --out "$OUT" \
        > "$OUT/fsdp_w2.log" 2>&1; echo "fsdp_check w2 exit $?"; tail -5 "$OUT/fsdp_w2.log"
    CUDA_VISIBLE_DEVICES=0 python3 -m torch.distributed.run --nproc-per-node 1 -m rlk_models.testing.fsdp_check \
        /tmp/fsdp-rlk --out "$OUT" --accumulate 2 > "$OUT/fsdp_w1.log" 2>&1; echo "fsdp_check w1 exit $?"
    python3 -c "import torch, sys; a, b = (torch.load(f'$OUT/grads_w{w}.pt') for w in (2, 1)); \
print('grads 2 ranks == 1 rank accumulating:', all(torch.equal(a[k], b[k]) for k in a))" | tee "$OUT/fsdp_grads.txt"
    cat "$OUT"/fsdp_check_w*.json
    rm -f "$OUT"/grads_w*.pt
    # one GRPO step end to end: vLLM TP=2 rollout (external_launcher) + FSDP2 training + weight sync
    [ "${SKIP_GRPO_TP2:-0}" = 1 ] || { timeout 300 python3 -m torch.distributed.run --nproc-per-node 2 \
        -m rlk_models.testing.grpo_tp2 /tmp/fsdp-rlk --out "$OUT" --steps 2 > "$OUT/grpo_tp2.log" 2>&1
        echo "grpo_tp2 exit $?"; grep '^{' "$OUT/grpo_tp2.log" || tail -30 "$OUT/grpo_tp2.log"; }
    ;;
grpo)
    # rlk-grpo --device cuda --shape 0.6b: SFT on the GPU (cached), then the rlk run and the stock run, each in
    # its own process (an in-process engine's GPU memory is freed with its process; the second run's summary
    # and plot include the first); checkpoints stay in /tmp, metrics and plot come back
    # (GRPO_RUNS: which runs, default both; GRPO_OUT: the --out, default /tmp/grpo-gpu)
    gout=${GRPO_OUT:-/tmp/grpo-gpu}
    for run in ${GRPO_RUNS:-rlk stock}; do
        CUDA_VISIBLE_DEVICES=0 timeout "${GRPO_LIMIT:-420}" python3 -m rlk_models.cli.grpo --device cuda --shape 0.6b --runs $run \
            --out "$gout" ${GRPO_ARGS:-} > "$OUT/grpo_gpu_$run.log" 2>&1; echo "grpo $run exit $?"
        grep -E "^(rlk-models|stock transformers):" "$OUT/grpo_gpu_$run.log" || tail -20 "$OUT/grpo_gpu_$run.log"
    done
    mkdir -p "$OUT/grpo"; cp -r "$gout"/{rlk,stock,summary.json,grpo.png} "$OUT/grpo/" 2>/dev/null
    cat "$gout"/checkpoints/*/sft.json 2>/dev/null | head -c 600; echo
    ;;
push)
    for shape in ${PUSH_SHAPES:-tiny 0.6b}; do  # (the JSON line: vLLM's exit warnings come after it)
        python3 benchmarks/push_weights.py --shape "$shape" --pushes 7 --work "/tmp/rlk-push-$shape" 2>&1 \
            | grep '^{' | tail -1 | tee "$OUT/push_weights_$shape.json"
    done
    ;;
trl)
    python3 -m pip install -q --no-deps --no-index --target /tmp/site .wheels/*.whl 2>&1 | tail -1
    # a weight push into an in-process engine against vLLM's reload and the bare load (28 layers, tiny)
    # (the JSON line: vLLM's exit warnings come after it)
    [ "${SKIP_PUSH:-0}" = 1 ] ||  # SKIP_PUSH=1: not this (PART=push times the push by its parts)
        python3 benchmarks/push_weights.py --pushes 5 2>&1 | grep '^{' | tail -1 | tee "$OUT/push_weights.json"
    # one visible GPU: transformers' Trainer wraps a model in nn.DataParallel when it sees several, which
    # GRPOTrainer refuses (the first x2 run died there)
    # TRL_KINDS=rlk: one side per call when both would pass 10 minutes; rlk-graphs: rlk with --cuda-graphs
    for run in ${TRL_KINDS:-rlk stock}; do
        kind=${run%-graphs}
        graphs=$([ "$run" != "$kind" ] && echo --cuda-graphs)
        CUDA_VISIBLE_DEVICES=0 timeout "${TRL_LIMIT:-300}" python3 benchmarks/trl_grpo.py $kind --device cuda --shape 0.6b --out "$OUT" \
            --work /tmp/grpo-gpu $graphs \
            --steps "${TRL_STEPS:-30}" ${TRL_ARGS:-} > "$OUT/trl_$run.log" 2>&1; echo "trl $run exit $?"
        grep RESULT "$OUT/trl_$run.log" || tail -20 "$OUT/trl_$run.log"
    done
    ;;
train)
    rm -rf /tmp/vllm_cuda  # the engine's checkpoints (see vllm)
    python3 -m pip install -q --no-deps --no-index --target /tmp/site .wheels/liger_kernel-*.whl 2>&1 | tail -1
    export PYTHONPATH="$PYTHONPATH:/tmp/site"  # the wheel's target (also without .vllm-cuda carried)
    for shape in ${TRAIN_SHAPES:-1.7b 8b}; do
        layers=$([ "$shape" = 8b ] && echo "${TRAIN_8B_LAYERS:-4}" || echo 0)
        CUDA_VISIBLE_DEVICES=0 python3 benchmarks/train_step.py --shape "$shape" --layers "$layers" \
            --out "$OUT" ${TRAIN_ARGS:-} 2>&1 | tee "$OUT/train_step_$shape.log" | tail -45
    done
    ;;
verify)
    # the checkpoints of tests/gpu/test_vllm_cuda.py::tp_checkpoints (K/TP holds whole 64-wide groups)
    python3 - <<'PY' 2>&1 | tail -1
from pathlib import Path
from rlk_models.conversion import convert
from rlk_models.testing.tiny import make_tiny_hf_checkpoint
for name, family, extra in [("qwen3", "qwen3", {}), ("llama_bias", "llama", {
        "attention_bias": True, "mlp_bias": True, "num_key_value_heads": 2})]:
    hf = make_tiny_hf_checkpoint(Path(f"/tmp/tp-{name}-hf"), family, seed=1, head_dim=128, intermediate_size=512,
                                 **extra)
    convert(hf, Path(f"/tmp/tp-{name}-rlk"), rlk_backend="triton", force=True, progress=False)
print("tp checkpoints ready")
PY
    for v in ${VARIANTS:-qwen3}; do
        timeout "${VERIFY_TIMEOUT:-540}" python3 -m rlk_models.cli.verify "/tmp/tp-$v-rlk" --tp "${TP:-2}" \
            ${CONFIGS:+--configs "$CONFIGS"} > "$OUT/verify_${v}_tp${TP:-2}.log" 2>&1
        echo "rlk-verify $v tp${TP:-2} exit $?"; grep -E "^[a-z_0-9]+ +[0-9]+ |^configuration|OK:|FAILED|Error" \
            "$OUT/verify_${v}_tp${TP:-2}.log"
    done
    ;;
*) echo "unknown part $part"; exit 2 ;;
esac
done
