#!/usr/bin/env bash
# One device call of a session's plan: several device_sweep.sh parts, each under its own time limit
# and into its own folder, so that a part cut at its limit still leaves the others' logs; everything
# comes back as one archive ($OUT/calls.tgz, the device tool returns few files) plus the summary log.
#
#   CALL=head   bash scripts/device_calls.sh   # head tests natively, the 1.7B training step (rlk, recompute, Liger),
#                                              # the q/k launch, dQ and RMSNorm tests (carry .wheels)
#   CALL=head2  bash scripts/device_calls.sh   # the head's tests (8B contract, rows, kept probabilities), the
#                                              # training step (rlk, Liger), the head sweep (carry .wheels)
#   CALL=engine bash scripts/device_calls.sh   # the 8B engine against stock vLLM (carry .vllm-cuda);
#                                              # ENGINE_ARGS adds vllm_cuda.py arguments (--engine-profile)
#   CALL=attn   bash scripts/device_calls.sh   # attention's TMA loads: its bitwise tests natively (training configs,
#                                              # paged schedules, backward), the training-shape sweep (TMA against
#                                              # pointer loads, cuDNN), the 1.7B training step (rlk, Liger; carry .wheels)
#   CALL=attn_vllm bash scripts/device_calls.sh  # the 1.7B training step (rlk, Liger; the GPU's idle gaps), the 8B
#                                              # paged-runner and TMA-thread tests, the training class against CUDA
#                                              # vLLM (rlk-verify, three configurations; generate) (carry .wheels
#                                              # and .vllm-cuda)
#   CALL=vllm_rest bash scripts/device_calls.sh  # the CUDA vLLM suite's other qwen3 configurations (the compiled
#                                              # class, batches 1/5/16 greedy, one sequence at a time) (carry .vllm-cuda)
#   CALL=mlp    bash scripts/device_calls.sh   # the fused SiLU-mul + down projection natively (its bits, the
#                                              # dense ops' tests), the 1.7B training step (rlk, Liger; the step's
#                                              # wall time split by CUDA events), the whole 8B model's training
#                                              # step (rlk, Liger; TRAIN_8B_LAYERS, default 36) (carry .wheels)
#   CALL=vllm_more bash scripts/device_calls.sh  # the CUDA vLLM suite: llama_bias (three configurations), qwen3's
#                                              # large-batch and full-graph ones, serve and generate (carry .vllm-cuda)
#   CALL=vllm_last bash scripts/device_calls.sh  # qwen3 compiled with piecewise graphs, weight sync, llama_bias
#                                              # under full graphs of mixed steps (carry .vllm-cuda)
#   CALL=gen_8b bash scripts/device_calls.sh   # generate() on CUDA, the whole 8B model's training step profiled
#                                              # (rlk, Liger) (carry .wheels and .vllm-cuda)
#   CALL=ds     bash scripts/device_calls.sh   # attention's backward with dS kept (dQ one dot a tile): its bitwise tests
#                                              # natively, the training-shape sweep (kept against recomputed dS), the
#                                              # whole 8B model's training step profiled (rlk, Liger) (carry .wheels)
#   CALL=dscheck bash scripts/device_calls.sh  # the kept dS against recomputed with a NaN-filled buffer, every backward
#                                              # candidate (attention_ds_check.py), the attention tests natively, the
#                                              # whole 8B model's training step profiled (rlk, Liger) (carry .wheels)
#   CALL=ds_final bash scripts/device_calls.sh # the kept-dS bitwise tests natively, the whole 8B model's training step
#                                              # profiled (rlk, Liger) (carry .wheels)
#   CALL=halves bash scripts/device_calls.sh   # the row-parallel matmul with 2 K-groups and h0 stashed against cuBLAS and
#                                              # today's 8 groups (matmul_halves_probe.py), then CUDA vLLM suite
#                                              # configurations not yet run under contract 4 (carry .vllm-cuda)
#   CALL=norms  bash scripts/device_calls.sh   # the norm launches at the 8B/1.7B step sizes (which of them is off),
#                                              # the norm/rope
#                                              # tests natively, then the 8B step with both passes' kernels
#                                              # profiled (carry .wheels)
#   CALL=norms2 bash scripts/device_calls.sh  # the norm launches (int32 rows, weight read in x's layout, dw's fold
#                                              # unrolled), the norm/rope/fold tests natively, the 8B step profiled,
#                                              # then CUDA vLLM's qwen3 (q/k norm + RoPE) graphs off and large batches
#                                              # (carry .wheels and .vllm-cuda)
#   CALL=norms3 bash scripts/device_calls.sh  # the norm/rope/fold tests natively, the 1.7B step profiled (rlk, Liger),
#                                              # CUDA vLLM's llama_bias half not yet run under contract 4 (carry .wheels
#                                              # and .vllm-cuda)
#   CALL=norms4 bash scripts/device_calls.sh  # the norm launches, forward and backward (which backward is off), the
#                                              # 8B contract's row-wise ops, the paged runner and the KV-cache write
#                                              # (int32 slots) natively, the CUDA vLLM
#                                              # suite's llama_bias configurations not yet run on session 26's norms
#                                              # (carry .vllm-cuda)
#   CALL=bwd    bash scripts/device_calls.sh   # the norm backward at each load pipeline depth, timed and checked
#                                              # bitwise, the norm/rope contract tests natively, the whole 8B step
#                                              # (carry .wheels)
#   CALL=bwd_final bash scripts/device_calls.sh  # the 8B contract's row-wise ops and the q/k gradient written into
#                                              # the qkv gradient natively, the 8B and 1.7B steps (carry .wheels;
#                                              # SKIP_17B=1: not the 1.7B step)
#   CALL=sm90 bash scripts/device_calls.sh      # the Gluon attention forward: bits natively, speed against
#                                              # _varlen_fwd and cuDNN, the 8B step (carry .wheels)
#   CALL=final28 bash scripts/device_calls.sh   # the D = 64 backward's kept-dS check, the sm90 test, the 1.7B and 8B
#                                              # steps (carry .wheels)
#   CALL=smalld bash scripts/device_calls.sh    # the D = 64 backward's default (64-row dQ) and the shared qkv
#                                              # gradient buffer, natively (~130 s, no carry)
#   CALL=s29 bash scripts/device_calls.sh       # smalld, the Gluon forward's sweep, then the 8B step (carry .wheels)
#   CALL=s29b bash scripts/device_calls.sh      # the qkv gradient buffer under saved-tensor hooks natively, the 8B
#                                              # and 1.7B steps (carry .wheels)
#   CALL=head90 bash scripts/device_calls.sh    # the Gluon head statistics kernel (head_sm90): its bits, then its
#                                              # time against the Triton kernel (no carry; TRAIN=1: the 8B and
#                                              # 1.7B steps, rlk against rlk_head_triton, carry .wheels)
#   CALL=mm90 bash scripts/device_calls.sh      # the row-parallel matmul's Gluon K-group form (Launch.sm90): its
#                                              # bits in the launch-choices test (o, down), then its time against
#                                              # the default and cuBLAS (no carry)
#   CALL=s30 bash scripts/device_calls.sh       # head90 and mm90 without the steps, in one call: both Gluon forms'
#                                              # bits, then their times (no carry)
#   CALL=s30b bash scripts/device_calls.sh      # the Gluon forms as defaults (matmul above 256 rows, the head's stats by
#                                              # K): their bits natively, the 8B step, the matmul against its Triton
#                                              # rivals from 384 rows, the head's stats at T = 256, 2048 (carry .wheels)
#   CALL=s30c bash scripts/device_calls.sh      # the 8B and 1.7B steps on the persistent Gluon matmul and the head's
#                                              # stats forms by T and K (carry .wheels)
#   CALL=s30d bash scripts/device_calls.sh      # s30c's 8B step alone (the session's last device seconds)
#   CALL=s31 bash scripts/device_calls.sh       # the Gluon matmul's 64-row tile forms: bits natively (o, down), every
#                                              # form timed from 128 rows, the 1.7B step (carry .wheels)
#   CALL=s31b bash scripts/device_calls.sh      # the RL-shaped rollout at 1.7B (rlk, stock), then the whole matmul table
#                                              # against cuBLAS (carry .vllm-cuda)
#   CALL=s32 bash scripts/device_calls.sh       # Launch.tail's, the 192-row tiles' and the plain Gluon forms' bits
#                                              # and times at M = 192, 384, 768 (no carry)
#   CALL=s32b bash scripts/device_calls.sh      # the split-K launches' fold kernel alone against the whole launch
#                                              # (decode sizes), the plain Gluon forms at the head's shape and at
#                                              # the 1.7B plain layers (128-768 rows) (no carry)
#   CALL=s33 bash scripts/device_calls.sh       # the launch-choice bits of the four 8B layers (every candidate and
#                                              # default), then the 192-row forms timed at 384/768 rows (no carry)
#   CALL=s33b bash scripts/device_calls.sh      # every sm90 form at the buckets' edges (256-1024 rows), then the whole
#                                              # matmul table against cuBLAS (no carry)
#   CALL=s33c bash scripts/device_calls.sh      # s33's bits alone (no carry)
#   CALL=s34 bash scripts/device_calls.sh       # the 1.7B layers' rows at their buckets' edges, every sm90 form at
#                                              # their 160-768 rows, then the whole matmul table (no carry)
#   CALL=s34b bash scripts/device_calls.sh      # s34's final 1.7B defaults: rows, sm90 forms at the changed buckets,
#                                              # then the RL-shaped rollout at 1.7B (carry .vllm-cuda)
#   CALL=decode17 bash scripts/device_calls.sh  # the 1.7B decode step's kernels at batch 1 and 64, rlk against
#                                              # stock (carry .vllm-cuda)
#   CALL=cold bash scripts/device_calls.sh      # the matmul table with each point also timed L2-cold (no carry)
#   CALL=s35 bash scripts/device_calls.sh       # the Gluon 64 x 64 tiles: bits (o, down), then every sm90 form at
#                                              # o/down 1.7B and 8B, 128-768 rows, and qkv 1.7B (no carry)
#   CALL=s35h bash scripts/device_calls.sh      # the head epilogue's skips: the statistics kernel's digests and times
#                                              # under the revision before them (.probe_old, carried: `git archive REV
#                                              # rlk_models | tar -x -C .probe_old`) and this one, the head's GPU
#                                              # tests natively, then the Gluon 64 x 64 tiles' bits (o, down)
#   CALL=s35g bash scripts/device_calls.sh      # the graphed head forward's kernels and idle time at 1, 16, 128 rows
#                                              # against the cuBLAS matmul's (head_sweep.py --graph-split; no carry)
#   CALL=s36 bash scripts/device_calls.sh       # a head change (session 36: targets localized in the stats kernel,
#                                              # one tree launch a shard): digests and times against main
#                                              # (.probe_old: `git archive main rlk_models | tar -x -C .probe_old`),
#                                              # the head's tests natively, the graphed forward's kernels
#                                              # (PROBE_ONLY=1: the probe and its stages alone)
#   CALL=s37 bash scripts/device_calls.sh      # a head change that keeps the bits: s36's probe and graph split, then
#                                              # two rlk-verify configurations in CUDA vLLM (carry .probe_old, .vllm-cuda)
#   CALL=s38 bash scripts/device_calls.sh      # the head backward at 128-512 rows: kernels against torch's, dh's
#                                              # launch candidates, before / after the dW buffer (carry .probe_old)
#   CALL=s38b bash scripts/device_calls.sh     # the head backward's host time and dh split-K candidates, then
#                                              # the head's GPU tests natively
#   CALL=s39fold bash scripts/device_calls.sh  # docs/pending/s38-fold-norm applied: its tests natively, the
#                                              # row-parallel bits, rlk-verify in CUDA vLLM (carry .vllm-cuda)
#   CALL=s40graphs bash scripts/device_calls.sh  # the head graphs (session 39's series, merged in 40): their and
#                                              # full_logprobs(out=)'s tests natively, rlk-verify in CUDA vLLM
#                                              # (carry .vllm-cuda); then CALL=decode17 (the batch-256 step)
#   CALL=s40compiled bash scripts/device_calls.sh  # rlk-verify's compiled configurations in CUDA vLLM (the opaque
#                                              # backend without linear_unfolded, session 39; carry .vllm-cuda)
#   CALL=b1ab bash scripts/device_calls.sh     # batch-1 latency before and after the head graphs to 256 rows: the
#                                              # rlk engine from .probe_old (rlk_models at 53d9de3), then this
#                                              # tree's rlk and stock, one 1.7B benchmark each (carry .vllm-cuda and
#                                              # .probe_old)
#   CALL=s41bk bash scripts/device_calls.sh    # Launch.block_k=128 (two K-tiles a pipeline step in one dot): its
#                                              # bits against the 64-wide default natively (no carry); CALL=s41bk2:
#                                              # the small-M search at qkv 1.7B and 8B with and without it;
#                                              # CALL=s41bk3: at qkv's rows 32 and 128, gate_up, o and down 1.7B
#   CALL=s41v bash scripts/device_calls.sh     # the 128-wide K-load defaults: the 1.7B rollout in CUDA vLLM (rlk's
#                                              # parity, stock) and every layer's rows at its table edges (carry
#                                              # .vllm-cuda)
#   CALL=s42v bash scripts/device_calls.sh     # the same rollout paired with stock, its engines given time to compile
#                                              # (carry .vllm-cuda); CALL=s42bk: 256-wide K loads' bits and the
#                                              # small-M search with them; CALL=s42rows: 128-wide loads at 128-256
#                                              # rows (no carry)
#   CALL=s42d bash scripts/device_calls.sh     # session 42's defaults: every layer's rows at its table edges, the
#                                              # changed rows re-timed, the 1.7B rollout in CUDA vLLM, rlk only
#                                              # (its log-probs against the training class's; carry .vllm-cuda)
#   CALL=s43rows bash scripts/device_calls.sh  # qkv 1.7B at 33-64 rows with and without swap, repeated; o/down
#                                              # 1.7B at 384-512 and 4096 rows with 128-wide loads (no carry)
#   CALL=s43g bash scripts/device_calls.sh     # the Gluon form's 128-wide K slots: each Gluon form at 64- and
#                                              # 128-wide slots against the default and cuBLAS; CALL=s43gbits: their
#                                              # bits natively (the wide loads' test at 128, its items compiled
#                                              # side by side: XDIST) (no carry)
#   CALL=s43rows8b bash scripts/device_calls.sh  # the 8B layers' small/mid-M misses (o at 64, gate_up at 32/192, qkv
#                                              # at 192) and qkv 1.7B at 256 searched with 128/256-wide loads; the
#                                              # plain lm_head at 192 against 192-row Gluon tiles (no carry)
#   CALL=s44park bash scripts/device_calls.sh   # the parked 192 x 128 K-group form timed with every Gluon form at
#                                              # o/down (8B, 1.7B) from 1024 rows, then its bits (no carry)
#   CALL=s44rows256 bash scripts/device_calls.sh  # the 8B layers at 256 rows (the engine's batch-256 decode step)
#                                              # searched with 128/256-wide loads into a launch file (no carry)
#   CALL=s44prove bash scripts/device_calls.sh  # a search's launch file (carried as .tuned/launches.json) as the
#                                              # default: the table-edges bits (XDIST), its rows timed without and
#                                              # with it (carry .tuned)
#   CALL=s45rows bash scripts/device_calls.sh  # qkv 1.7B at 192/384 rows and o/down 8B at 384 searched into a
#                                              # launch file, for CALL=s44prove (no carry)
#   CALL=s46rp bash scripts/device_calls.sh    # o/down 8B at 384 and 768 rows searched with the Gluon K-group
#                                              # forms into a launch file, for CALL=s44prove (no carry)
#   CALL=s47 bash scripts/device_calls.sh       # the table-edges bits (XDIST), then the whole table's graph rows
#                                              # with the kernels each side ran, #17's count and why each miss
#                                              # misses (matmul_sweep.py explain) (no carry)
#   (CALL=s47one, session 47's H100 call: Launch.streamk's bits and time with the table edges; streamk, slower,
#    was removed in session 48: the kernel, its tests and its calls are at 2bae642. CALL=s48fix, session 48's H100
#    call: the row-parallel table edges and the fold inside the norm after the fold fix, Launch.last_folds's bits
#    and time; last_folds, slower as the engine's layer, was removed in session 48: it and its call are at 379331a)
#   CALL=s49 bash scripts/device_calls.sh       # the landed ops: the table-edges bits (XDIST), then rlk-verify
#                                              # in CUDA vLLM for Qwen3's batches and chunked prefill (carry
#                                              # .vllm-cuda)
#   CALL=s54w bash scripts/device_calls.sh      # 128 x 96 tiles in K-groups: bits natively, then searched at o/down
#                                              # 8B and 1.7B, 384-768 rows (no carry); CALL=s54prove: the file
#                                              # proven and timed (carry .tuned)
#   CALL=s54b bash scripts/device_calls.sh      # session 54's TUNED rows: the table edges, then against the tiles
#                                              # they replaced (a launch file), on an H200 then s47 (no carry)
#   CALL=s54e bash scripts/device_calls.sh      # the rows just past a multiple of 128 (257, 320, 641, 704) searched
#                                              # at down 8B and o/down 1.7B (no carry)
#   CALL=s55w bash scripts/device_calls.sh      # 64 x 96 tiles split by columns: bits natively in K-groups, then
#                                              # searched at o/down 8B and 1.7B, 192-320 rows, winners proven (no carry)
#   CALL=s55s / s55k / s55r bash scripts/device_calls.sh  # the 1.7B layers at 257 rows searched; cuBLAS's kernels
#                                              # at 257 / 641 rows; --graph-rounds and o 8B at 32 rows (no carry)
#   CALL=s55var bash scripts/device_calls.sh    # one launch on copies of its operands at other addresses
#                                              # (matmul_variance.py; no carry)
#   CALL=s56idle bash scripts/device_calls.sh   # the idle consumers' pass (matmul_sm90.PASS_IDLE): the Gluon form's
#                                              # bits natively, then timed against the form before it (matmul_idle.py;
#                                              # no carry; both at 399cda8 only, reverted: slower)
#   CALL=s56h200 bash scripts/device_calls.sh   # CALL=s54b without its s47 table or the old file's edges: for an
#                                              # H200 in ~200 s (no carry)
#   CALL=s57h200 bash scripts/device_calls.sh   # CALL=s56h200, then CALL=s47's table without its edges: for an
#                                              # H200 in ~450 s (no carry)
#   CALL=s57search bash scripts/device_calls.sh  # the H200's qkv 8B at 128 / 192 rows searched with the 96-column
#                                              # tiles, winners proven and timed (no carry, ~400 s)
#   CALL=s58host bash scripts/device_calls.sh   # the host's time to queue each op against torch's (host_time.py), then
#                                              # the 1.7B training step at 1 x 1024 tokens, profiled (rlk, stock, Liger;
#                                              # carry .wheels; ~300 s)
#   CALL=s58host2 bash scripts/device_calls.sh  # each op's host time by stage of Triton's launch path, this tree's
#                                              # package against .probe_old's, then the 1.7B step at 1 x 1024 tokens
#                                              # under each (rlk; stock once) (carry .probe_old; ~250 s)
#   CALL=s60 bash scripts/device_calls.sh       # by the card: an H200 runs CALL=s57search; any other card the two
#                                              # test_kernels tests fixed in session 59, CALL=s59layer and the graphed
#                                              # pass at 8 sequences (no carry; ~480 s)
#   CALL=s60train bash scripts/device_calls.sh  # the graphed training pass: its GPU tests, then the 1.7B step at
#                                              # 1 x 1024 tokens against stock and Liger (carry .wheels; ~400 s)
#   CALL=s62 bash scripts/device_calls.sh       # the graphed pass's GPU tests, then CALL=s62trl (~560 s)
#   CALL=s62stock bash scripts/device_calls.sh  # stock TRL against RLKGRPOTrainer(cuda_graphs=True) (~350 s)
#   CALL=s62trl bash scripts/device_calls.sh    # TRL GRPO (colocated vLLM, 0.6B): RLKGRPOTrainer eager against
#                                              # cuda_graphs=True (carry .vllm-cuda and .wheels; ~400 s)
#   CALL=s64 bash scripts/device_calls.sh       # on an H200, CALL=s57search; on any card, the CUDA weight-sync tests
#                                              # (the stacked finiteness check), then (not after the search)
#                                              # CALL=s64b (carry .vllm-cuda; ~500 s on an H200, ~420 s elsewhere)
#   CALL=s64b bash scripts/device_calls.sh      # score_mask under graphs: its GPU tests, then its cost (~320 s)
#   CALL=s65 bash scripts/device_calls.sh       # the graphed pass's GPU tests, then on an H200 CALL=s57search, on
#                                              # another card the scored-rows training bench (no carry; ~450 s)
#   CALL=s65c bash scripts/device_calls.sh      # the graphed pass's GPU tests, then on an H200 CALL=s57search, its
#                                              # proof where the call's limit allows (no carry; ~330-500 s on an H200)
#   CALL=s61grpo bash scripts/device_calls.sh   # rlk-grpo at the 0.6B shape, eager against --cuda-graphs (15 steps
#                                              # each, the trainer's seconds a step; carry .vllm-cuda; ~330 s)
#   CALL=s58ab bash scripts/device_calls.sh     # host time per op, this tree's package and .probe_old's alternately,
#                                              # 3 processes each (carry .probe_old; ~150 s)
#   CALL=s57layer bash scripts/device_calls.sh  # o/down 8B at 384-1024 rows as the engine runs them, 3 rounds,
#                                              # with each side's kernels and their times (no carry, ~120 s)
#   CALL=s56q bash scripts/device_calls.sh      # qkv 8B at 128 / 192 rows against 64 x 96 tiles (no carry)
#   CALL=s56solo bash scripts/device_calls.sh   # the solo tiles (matmul_sm90.SOLO_TILES): the table edges' bits, then
#                                              # timed against the form before them (matmul_solo.py; no carry; both at
#                                              # 6cf84b9 only, reverted: slower)
#   CALL=s54 bash scripts/device_calls.sh       # by the card: an H200 runs CALL=s47 then CALL=s52ab, any other
#                                              # card CALL=s47layer (no carry)
#   CALL=s50 bash scripts/device_calls.sh       # session 49's fold kernel: the table-edges bits (XDIST), its
#                                              # sums and bias columns natively, its cost (no carry)
#   CALL=s49h100 bash scripts/device_calls.sh   # the H100's misses of the H200 table searched into a launch
#                                              # file (no carry)
#   CALL=s48plain bash scripts/device_calls.sh  # qkv and gate_up 8B's graph rows on the current defaults, #17's
#                                              # count (no carry)
#   CALL=s48qkv bash scripts/device_calls.sh    # qkv 8B at 192 and 768 rows searched into a launch file (no
#                                              # carry)
#   CALL=s48engine bash scripts/device_calls.sh # the 1.7B engine against stock vLLM on the current ops (carry
#                                              # .vllm-cuda)
#   CALL=s47layer bash scripts/device_calls.sh  # the row-parallel layers with the norm after them, as the engine
#                                              # runs them (--layer), against cuBLAS into the same norm (no carry)
#   CALL=s43edges bash scripts/device_calls.sh  # after a TUNED change: the table-edges bits (XDIST) and the
#                                              # table's graph rows of SHAPES43 (default the 1.7B layers) against
#                                              # cuBLAS (no carry)
#   CALL=s36t bash scripts/device_calls.sh     # the head's tests and two rlk-verify configurations in CUDA vLLM
#                                              # (carry .vllm-cuda)
#   CALL=qkcheck bash scripts/device_calls.sh  # the q/k norm + RoPE hypothesis contract tests natively, to
#                                              # completion; TRAIN=1: then the 8B step (carry .wheels)
#   CALL=varied bash scripts/device_calls.sh   # an RL-shaped rollout (mixed prefill/decode steps): stock, and rlk
#                                              # with graphs up to 2048 tokens (its default) and 512 (vLLM's)
#                                              # (carry .vllm-cuda)
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
train_8b() {  # train_8b SECONDS "TRAIN_ARGS" TAIL: the whole 8B model's training step (STACKS, default rlk and
             # Liger; TRAIN_8B_LAYERS, default 36: rlk about 60-75 GB, Liger about 80-93 at 8 x 2048 tokens), then
             # the log's last TAIL lines
    part train_8b "$1" PART=train TRAIN_SHAPES=8b TRAIN_8B_LAYERS="${TRAIN_8B_LAYERS:-36}" \
        TRAIN_ARGS="--stacks ${STACKS:-rlk,liger} $2"
    tail -"$3" "$ROOT_OUT/train_8b.log"
}
bench() {  # bench NAME SECONDS SCRIPT ARGS...: one benchmark script, its JSON in $ROOT_OUT/NAME, its log beside it
    local name=$1 secs=$2
    shift 2
    mkdir -p "$ROOT_OUT/$name"
    OUT="$ROOT_OUT/$name" PYTHONPATH="$PWD" timeout "$secs" python3 "$@" > "$ROOT_OUT/$name.log" 2>&1
    echo "$name exit $?"
}
search_into_file() {  # search_into_file NAME SECONDS ARGS...: a matmul_sweep.py --search --quick bench (ARGS: its
                     # --m, --shapes, --block-k...); --retime: the 6 fastest, the default and cuBLAS again, 5 rounds
                     # round-robin, each winner by > 4% into $ROOT_OUT/launches.json (every search adds its own),
                     # which CALL=s44prove (carry .tuned: the file as .tuned/launches.json) proves and times
    local name=$1 secs=$2
    shift 2
    bench "$name" "$secs" benchmarks/triton/matmul_sweep.py --search --quick "$@" --retime 6 --rounds 5 \
        --write-launches "$ROOT_OUT/launches.json"
}
grouped_wide_then_search() {  # grouped_wide_then_search NAME SECONDS ARGS...: the wide Gluon tiles' bits in K-groups
                             # natively (test_matmul_wide_gluon_tiles_in_k_groups_give_the_grouped_bits), then
                             # search_into_file NAME SECONDS ARGS... --block-k 64,128 and its summary
    local name=$1 secs=$2
    shift 2
    part gwide 200 PART=tests TEST_TIMEOUT=190 TESTS=tests/gpu/test_triton_contract_8b.py \
        K="wide_gluon_tiles_in_k_groups"
    test_summary gwide 12
    search_into_file "$name" "$secs" "$@" --block-k 64,128
    search_summary "$ROOT_OUT/$name.log"
}
search_summary() {  # search_summary LOG...: the searches' rows, retimed medians, bit differences and entries written
    grep -hE "search:|graph:|retimed:|BITS|launch file|not written" "$@" | cut -c1-200 | head -40
}
table_edges() {  # table_edges SECONDS [VAR=VALUE...]: every layer's rows at its table edges (the table-edges test
                # of tests/gpu/test_triton_contract_8b.py, under RLK_MATMUL_LAUNCHES where set), then its summary;
                # the part is $EDGES (default edges)
    local secs=$1 name=${EDGES:-edges}
    shift
    part "$name" "$secs" PART=tests TEST_TIMEOUT=$((secs - 10)) TESTS=tests/gpu/test_triton_contract_8b.py \
        K="rows_at_the_table_edges" "$@"
    test_summary "$name" 12
}
launch_file_rows() {  # launch_file_rows FILE: a launch file's layers and rows, "layer,layer,... m,m,..." (one line)
    python3 -c "import json, sys; e = json.load(open(sys.argv[1]))['launches']
print(','.join(dict.fromkeys(x['layer'] for x in e)), ','.join(map(str, sorted({m for x in e for m in x['rows']}))))" "$1"
}
prove_launches() {  # prove_launches FILE [PREFIX [SECONDS]]: a search's launch file as the default, with no code edit
                   # (RLK_MATMUL_LAUNCHES): every layer's rows at its table edges and the file's own, then its layers
                   # at its rows, the built-in defaults (PREFIXbefore) and the file's (PREFIXafter) timed against
                   # cuBLAS in the same call, each row's sides PROVE_ROUNDS times round-robin (default 3, since
                   # session 54: medians, the runs kept); the three parts' limits SECONDS each (default: 150, the
                   # edges 200)
    local lf=$1 pre=${2:-} secs=${3:-150} edge_secs=${3:-200} layers rows
    [ -f "$lf" ] || { echo "no launch file $lf"; return 1; }
    read -r layers rows < <(launch_file_rows "$lf")
    rows=${PROVE_ROWS:-$rows}  # PROVE_ROWS=m,m,...: timed at these rows instead (a range's inside too)
    echo "launch file: layers $layers, rows $rows"
    # PROVE_LAYER=1: the row-parallel layers timed as the engine runs them too (--layer: the product, then the
    # residual add + RMSNorm), where back-to-back products hide a second launch's weight read in L2
    local layer=${PROVE_LAYER:+--layer}
    bench "${pre}before" "$secs" benchmarks/triton/matmul_sweep.py --quick --m "$rows" --shapes "$layers" \
        --graph-rounds "${PROVE_ROUNDS:-3}" $layer
    export RLK_MATMUL_LAUNCHES="$lf"
    EDGES="${pre}edges" table_edges "$edge_secs" XDIST=8
    bench "${pre}after" "$secs" benchmarks/triton/matmul_sweep.py --quick --m "$rows" --shapes "$layers" \
        --graph-rounds "${PROVE_ROUNDS:-3}" $layer
    unset RLK_MATMUL_LAUNCHES
    grep -hE "graph:|layer:" "$ROOT_OUT/${pre}before.log" "$ROOT_OUT/${pre}after.log" | cut -c1-200
}
vllm_figures() {  # vllm_figures NAME SHAPE: a PART=vllm part's batch-1 TPOT, throughput (and their ratios to
                 # stock) and rlk's log-prob mismatches, from its JSON
    grep -hE '"(batch1_tpot_ms|batch1_tpot_vs_stock|tok_per_s|throughput_vs_stock|mismatch_count|max_abs_diff)"' \
        "$ROOT_OUT/$1/vllm_cuda_$2.json" | head -20
}
test_summary() {  # test_summary NAME [LINES]: the failures, PASSED lines and totals of part NAME's GPU tests
    grep -E "^E  .*|FAILED|PASSED|passed|failed" "$ROOT_OUT/$1/gpu_tests.log" | cut -c1-200 | head -"${2:-24}"
}
verify_qwen3() {  # verify_qwen3 NAME: rlk-verify inside CUDA vLLM for Qwen3, 64-256-sequence batches and chunked
                 # prefill (0 mismatches needed; carry .vllm-cuda), then its summary
    part "$1" 260 PART=tests TESTS=tests/gpu/test_vllm_cuda.py K="qwen3 and not tp2 and (batches_64 or chunked)" \
        TEST_TIMEOUT=150
    test_summary "$1" 12
}
matmul_bits() {  # matmul_bits NAME SECONDS [LAYER...]: the launch-choice bits of 8B layers (default o, down, qkv,
                 # gate_up: every candidate and default against the Triton form; rows across M), each test under the
                 # part's limit
    local name=$1 secs=$2 c8=tests/gpu/test_triton_contract_8b.py tests=() layer
    shift 2
    [ $# -gt 0 ] || set -- o down qkv gate_up
    for layer in "$@"; do tests+=("$c8::test_matmul_rows_and_launch_choices[$layer]"); done
    part "$name" "$secs" PART=tests TEST_TIMEOUT=$((secs - 10)) TESTS="${tests[*]}"
    test_summary "$name"
}
head_probe() {  # head_probe SECONDS: head_epilogue_probe.py under .probe_old's package (carried) and this tree's, in
               # $ROOT_OUT/head_old and head_new, the second --against the first (each output's digest and time)
    mkdir -p "$ROOT_OUT/head_old"
    OUT="$ROOT_OUT/head_old" PYTHONPATH="$PWD/.probe_old" timeout "$1" python3 benchmarks/triton/head_epilogue_probe.py \
        --stages /tmp/head_stages.pt \
        > "$ROOT_OUT/head_old.log" 2>&1
    echo "head_old exit $?"
    bench head_new "$1" benchmarks/triton/head_epilogue_probe.py --name head_epilogue_probe_new \
        --against "$ROOT_OUT/head_old/head_epilogue_probe.json" --stages /tmp/head_stages.pt
}
matmul_table() {  # matmul_table SECONDS [ARGS]: the whole matmul table against cuBLAS in $ROOT_OUT/table (nine
                  # shapes, M = 1-8192, the defaults only); ARGS go to matmul_sweep.py (--cold: L2-cold rows too)
    local secs=$1
    shift
    bench table "$secs" benchmarks/triton/matmul_sweep.py --search --quick --tiles 1x1 \
        --m 1,2,4,8,16,32,64,128,192,256,384,512,768,1024,2048,4096,8192 \
        --shapes qkv,o,gate_up,down,lm_head,qkv_1.7b,o_1.7b,gate_up_1.7b,down_1.7b "$@"
    grep -E "graph:|cold:" "$ROOT_OUT/table.log" | cut -c1-120
}
table_explained() {  # table_explained SECONDS: matmul_table with cuBLAS's kernels (--kernels; its exit here, the rows
                     # in table.log), then #17's count (``goal``) and why each miss misses (``explain``)
    matmul_table "$1" --kernels | head -1
    PYTHONPATH="$PWD" python3 benchmarks/triton/matmul_sweep.py goal "$ROOT_OUT/table/matmul_sweep.json" | tail -2
    PYTHONPATH="$PWD" python3 benchmarks/triton/matmul_sweep.py explain "$ROOT_OUT/table/matmul_sweep.json" |
        cut -c1-400
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
attn)
    part attn_tests 170 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/gpu/test_triton_contract_8b.py" \
        K="attention or tma_products or paged_runner" TEST_TIMEOUT=160
    part attn_sweep 130 PART=sweep SKIP_OPS=1 SKIP_HEAD=1 SKIP_MATMUL=1 ATTN_ARGS=--train
    grep -E "^train|fwd default" "$ROOT_OUT/attn_sweep.log" | tail -20
    part train 200 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 90"
    tail -30 "$ROOT_OUT/train.log"
    ;;
attn_vllm)
    part train 150 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 70"
    tail -12 "$ROOT_OUT/train.log"
    part contract_8b 110 PART=tests TESTS=tests/gpu/test_triton_contract_8b.py K="qwen3_8b_shape or tma_products" \
        TEST_TIMEOUT=100
    part vllm_tests 290 PART=tests TESTS="tests/gpu/test_vllm_cuda.py tests/gpu/test_generate_cuda.py" \
        K="(qwen3 and not tp2 and (temp1 or chunked or block16)) or left" TEST_TIMEOUT=150
    ;;
vllm_rest)
    part vllm_rest 300 PART=tests TESTS=tests/gpu/test_vllm_cuda.py \
        K="qwen3 and not tp2 and (compiled or greedy or max_num_seqs_1)" TEST_TIMEOUT=140
    ;;
mlp)
    part dense_tests 70 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/ops/test_contract.py" \
        K="silu_mul or rowwise or linear or backward_is_deterministic" TEST_TIMEOUT=60
    part train 160 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 70"
    tail -14 "$ROOT_OUT/train.log"
    train_8b 345 "--steps 6 --limit 150" 14
    ;;
vllm_more)
    part vllm_more 560 PART=tests TESTS="tests/gpu/test_vllm_cuda.py tests/gpu/test_serve_cuda.py tests/gpu/test_generate_cuda.py" \
        K="not tp2 and ((llama_bias and (batches_16 or chunked or block16)) or (qwen3 and (batches_64 or full_graphs)) or openai or generate)" \
        TEST_TIMEOUT=150
    ;;
vllm_last)
    part vllm_last 300 PART=tests TESTS=tests/gpu/test_vllm_cuda.py \
        K="not tp2 and ((qwen3 and compiled_piecewise) or weight_sync or (llama_bias and full_graphs))" TEST_TIMEOUT=200
    ;;
gen_8b)
    part generate 190 PART=tests TESTS=tests/gpu/test_generate_cuda.py TEST_TIMEOUT=150
    train_8b 200 "--steps 6 --profile --limit 90" 14
    ;;
dscheck)
    part dscheck 150 PART=dscheck DS_ARGS="--configs all"
    part attn_tests 150 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/gpu/test_triton_contract_8b.py" \
        K="attention" TEST_TIMEOUT=140
    train_8b 200 "--steps 6 --profile --limit 90" 14
    ;;
norms)
    part norms 120 PART=norms
    part norm_tests 150 PART=tests TESTS=tests/ops/triton/test_kernels.py K="rope or rms_norm" TEST_TIMEOUT=140
    train_8b 200 "--steps 4 --profile --limit 75" 8
    ;;
norms2)
    part norms 90 PART=norms
    part norm_tests 120 PART=tests TESTS=tests/ops/triton/test_kernels.py K="rope or rms or qk or fold" TEST_TIMEOUT=110
    train_8b 190 "--steps 4 --profile --limit 75" 8
    part vllm_qwen3 190 PART=tests TESTS=tests/gpu/test_vllm_cuda.py \
        K="qwen3 and not tp2 and (graphs_off or batches_64)" TEST_TIMEOUT=180
    ;;
norms3)
    part norm_tests 60 PART=tests TESTS=tests/ops/triton/test_kernels.py K="rope or rms or qk or fold" TEST_TIMEOUT=55
    part train 130 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 60"
    tail -8 "$ROOT_OUT/train.log"
    part vllm_llama 200 PART=tests TESTS=tests/gpu/test_vllm_cuda.py \
        K="llama_bias and not tp2 and (greedy or max_num_seqs or batches_64)" TEST_TIMEOUT=190
    ;;
norms4)
    part norms 60 PART=norms
    part contract_8b 120 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/gpu/test_triton_contract_8b.py" \
        K="rowwise or paged_runner or write_kv" TEST_TIMEOUT=110
    part vllm_llama 330 PART=tests TESTS=tests/gpu/test_vllm_cuda.py \
        K="llama_bias and not tp2 and (max_num_seqs or batches_64)" TEST_TIMEOUT=200
    ;;
bwd)
    part norms 100 PART=norms NORM_ARGS="--stages 1,2,3,4"
    part norm_tests 110 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/ops/test_contract.py tests/gpu/test_triton_contract_8b.py" \
        K="(rope or rms or qk or fold or rowwise) and not (linear or attention or silu or embedding or matmul)" TEST_TIMEOUT=100
    train_8b 200 "--steps 4 --profile --limit 75" 8
    ;;
bwd_final)
    part rowwise_8b 90 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/gpu/test_triton_contract_8b.py" \
        K="rowwise or writes_its_gradients or qk_norm_rope_in_one" TEST_TIMEOUT=80
    train_8b 190 "--steps 4 --profile --limit 75" 8
    if [ "${SKIP_17B:-0}" != 1 ]; then
        part train 140 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 60"
        tail -8 "$ROOT_OUT/train.log"
    fi
    ;;
sm90)
    # the Gluon attention forward: its forms' speed and bits against _varlen_fwd and cuDNN, its tests natively
    # (against _varlen_fwd and the paged kernel; the 8B contract's row-wise ops and the qkv gradient buffer too),
    # then the 8B step
    part attn_train 130 PART=sweep SKIP_OPS=1 SKIP_HEAD=1 SKIP_MATMUL=1 ATTN_ARGS="--train --quick"
    grep -E "^train|sm90" "$ROOT_OUT/attn_train/attention_sweep.log" | tail -16
    part sm90_tests 160 PART=tests TESTS="tests/gpu/test_triton_contract_8b.py tests/ops/triton/test_kernels.py" \
        K="sm90 or attention_training_configs or paged_attention or attention_close or rowwise or writes_its_gradients or qk_norm_rope_in_one" \
        TEST_TIMEOUT=150
    grep -E "^E  .*Error|FAILED" "$ROOT_OUT/sm90_tests/gpu_tests.log" | head -12
    [ "${SKIP_8B:-0}" = 1 ] || train_8b 200 "--steps 4 --profile --limit 75" 10
    ;;
final28)
    # session 28's last call: the backward's run-to-run check at D = 64 (kept dS against recomputed, NaN-filled),
    # the Gluon forward's test after its clean-up, the 1.7B and the 8B steps
    part dscheck 80 PART=dscheck DS_ARGS="--varlen --configs all"
    grep -E "varlen" "$ROOT_OUT/dscheck.log" | cut -c1-400 | head -12
    part sm90_tests 70 PART=tests TESTS=tests/gpu/test_triton_contract_8b.py K=sm90 TEST_TIMEOUT=60
    part train 130 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 60"
    tail -8 "$ROOT_OUT/train.log"
    train_8b 190 "--steps 4 --profile --limit 75" 8
    ;;
smalld)
    # the backward at head_dim 64 with BWD_CONFIG_SMALL_D (64-row dQ from the kept dS): the Gluon forward's test
    # (its run-to-run backward check at D = 64) twice; the qkv gradient buffer shared by attention and the q/k norm
    part smalld_1 80 PART=tests TESTS="tests/gpu/test_triton_contract_8b.py tests/ops/triton/test_kernels.py" \
        K="sm90_forward or share_one or writes_its_gradients" TEST_TIMEOUT=60
    part smalld_2 60 PART=tests TESTS=tests/gpu/test_triton_contract_8b.py K=sm90_forward TEST_TIMEOUT=50
    ;;
s29)
    # session 29's first call: the D = 64 default and the shared qkv gradient buffer (smalld), the Gluon
    # forward's forms timed (its persistent form, since deleted, was 1.09-1.12x slower), the 8B step
    CALL=smalld NO_TAR=1 bash scripts/device_calls.sh
    part attn_train 130 PART=sweep SKIP_OPS=1 SKIP_HEAD=1 SKIP_MATMUL=1 ATTN_ARGS="--train --quick"
    grep -E "sm90|SDPA" "$ROOT_OUT/attn_train/attention_sweep.log" | cut -c1-160 | tail -20
    train_8b 190 "--steps 4 --profile --limit 75" 10
    ;;
s29b)
    # the qkv gradient buffer's producers naming their columns in the forward (saved tensors lose their view base
    # under the decoder's saved-tensor hooks): the buffer tests and the training model's backward natively, the
    # 8B contract's model test (gradients run to run), then the 8B and 1.7B steps
    part buffer_tests 120 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/gpu/test_triton_contract_8b.py" \
        K="share_one or fills_one_qkv or writes_its_gradients or paged_runner_equals" TEST_TIMEOUT=100
    grep -E "^E  .*Error|FAILED" "$ROOT_OUT/buffer_tests/gpu_tests.log" | head -12
    train_8b 190 "--steps 4 --profile --limit 75" 8
    part train 130 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 60"
    tail -8 "$ROOT_OUT/train.log"
    ;;
head90)
    # the head's statistics from head_sm90 (Gluon; its ping-pong forms never run on a GPU before): every form bitwise
    # the Triton kernel's (a hang fails at the test's timeout), then all timed at the training step's T, the 8B and
    # 1.7B heads
    part head90_tests 120 PART=tests TESTS=tests/gpu/test_triton_contract_8b.py K=head_stats_sm90 TEST_TIMEOUT=60
    grep -E "^E  .*|FAILED" "$ROOT_OUT/head90_tests/gpu_tests.log" | head -12
    bench head90_sweep 200 benchmarks/triton/head_sweep.py --stats-kernels
    tail -4 "$ROOT_OUT/head90_sweep.log" | cut -c1-600
    if [ "${TRAIN:-0}" = 1 ]; then
        STACKS=rlk,rlk_head_triton,liger train_8b 230 "--steps 4 --profile --limit 75" 8
        part train 170 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,rlk_head_triton,liger --profile --limit 50"
        tail -8 "$ROOT_OUT/train.log"
    fi
    ;;
mm90)
    # matmul_sm90._mm_groups_ws (Gluon; never run on a GPU before): every SM90_CANDIDATES form bitwise the default
    # launch at M = 1, 200, 1024, 8192, bias or not, bf16 or fp32 out (a hang fails at the test's timeout), then the
    # forms timed under CUDA graphs at o and down, 8B and 1.7B, M = 1024, 4096, 16384
    part mm90_tests 200 PART=tests TESTS=tests/gpu/test_triton_contract_8b.py K="launch_choices and (o or down)" \
        TEST_TIMEOUT=180
    grep -E "^E  .*|FAILED" "$ROOT_OUT/mm90_tests/gpu_tests.log" | head -12
    bench mm90_sweep 200 benchmarks/triton/matmul_sweep.py sm90
    grep -E "M=" "$ROOT_OUT/mm90_sweep.log" | cut -c1-400
    ;;
s30)
    # head90 and mm90 in one call (the machine's start costs more than either): bits first, so a hang in one
    # form's test (cut at TEST_TIMEOUT) still leaves the other's, then the times
    part head90_tests 110 PART=tests TESTS=tests/gpu/test_triton_contract_8b.py K=head_stats_sm90 TEST_TIMEOUT=60
    grep -E "^E  .*|FAILED" "$ROOT_OUT/head90_tests/gpu_tests.log" | head -12
    part mm90_tests 170 PART=tests TESTS=tests/gpu/test_triton_contract_8b.py K="launch_choices and (o or down)" \
        TEST_TIMEOUT=160
    grep -E "^E  .*|FAILED" "$ROOT_OUT/mm90_tests/gpu_tests.log" | head -12
    bench head90_sweep 130 benchmarks/triton/head_sweep.py --stats-kernels
    tail -4 "$ROOT_OUT/head90_sweep.log" | cut -c1-600
    bench mm90_sweep 150 benchmarks/triton/matmul_sweep.py sm90
    grep -E "M=" "$ROOT_OUT/mm90_sweep.log" | cut -c1-400
    ;;
s30b)
    # the Gluon forms adopted: the o shape's launch choices (every sm90 form, persistent too, against the fallback;
    # a TP=2 rank's 4 groups), the compiled-kernel count, the head's stats forms and "auto", the table's fallback
    # natively; the 8B step on them (carry .wheels); then the matmul from 384 rows against its Triton rivals, the
    # stats kernels at T = 256 and 2048
    c8=tests/gpu/test_triton_contract_8b.py
    part s30b_tests 200 PART=tests TEST_TIMEOUT=180 TESTS="$c8::test_matmul_rows_and_launch_choices[o] \
$c8::test_a_step_size_compiles_no_new_matmul $c8::test_head_stats_sm90_is_the_triton_kernel \
tests/ops/triton/test_kernels.py::test_matmul_table_sm90_launch_falls_back_where_it_cannot_serve"
    test_summary s30b_tests 20
    train_8b 180 "--steps 4 --profile --limit 60" 8
    bench mm90_sweep 110 benchmarks/triton/matmul_sweep.py sm90
    grep -E "M=" "$ROOT_OUT/mm90_sweep.log" | cut -c1-400
    bench head90_sweep 50 benchmarks/triton/head_sweep.py --stats-kernels 256,2048
    tail -4 "$ROOT_OUT/head90_sweep.log" | cut -c1-300
    ;;
s30c)
    train_8b 150 "--steps 4 --profile --limit 55" 8
    part train 100 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 40"
    tail -8 "$ROOT_OUT/train.log"
    ;;
s30d)
    train_8b 150 "--steps 4 --profile --limit 55" 8
    ;;
s31)
    # the row-parallel Gluon form's 64-row tiles (split by columns; never run on a GPU before): every SM90_CANDIDATES
    # form bitwise the Triton fallback (o, then down; a hang fails at the test's timeout), then every form timed at
    # M = 128-1024 and 16384 against the Triton launches and cuBLAS, then the 1.7B step (carry .wheels)
    c8=tests/gpu/test_triton_contract_8b.py
    part s31_tests 210 PART=tests TEST_TIMEOUT=200 TESTS="$c8::test_matmul_rows_and_launch_choices[o] \
$c8::test_matmul_rows_and_launch_choices[down]"
    test_summary s31_tests 20
    bench mm90_sweep 200 benchmarks/triton/matmul_sweep.py sm90
    grep -E "M=" "$ROOT_OUT/mm90_sweep.log" | cut -c1-600
    part train 110 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,liger --profile --limit 45"
    tail -8 "$ROOT_OUT/train.log"
    ;;
s31b)
    # the 64-row Gluon tiles as defaults (M = 129-256; 1.7B o/down to 512): the RL-shaped rollout at 1.7B, whose
    # mixed prefill steps run them (rlk against stock; parity against training), then the whole matmul table against
    # cuBLAS (nine shapes, M = 1-8192, defaults only) (carry .vllm-cuda)
    VARIED_SHAPE=1.7b VARIED_ENGINES=rlk,stock VARIED_LIMIT=140 CALL=varied NO_TAR=1 bash scripts/device_calls.sh \
        | grep -E "tok_per_s|mismatch|max_abs|vs_stock\"" | head -20
    matmul_table 240
    ;;
s32)
    # Launch.tail (the last partial wave of 128-row Gluon tiles in 64-row ones), the 192-row tiles (three consumers)
    # and the Gluon kernel in one K-group for the plain layers (SM90_PLAIN_CANDIDATES; none run on a GPU yet): their
    # bits in the o and qkv launch choices (M = 700: 512 + 188 rows at o, 640 + 60 at qkv; a form that hangs fails
    # at the test's timeout, and the benches after it would hang too: read the test's log first), then every sm90
    # form timed at 192, 384 and 768 rows against the Triton forms it competes with and the default (o, down: the
    # tail, 192 x 64; qkv, gate_up: one group). Session 31's [o] + [down] took 160 s; [qkv] compiles its own Triton
    # forms and ~18 Gluon ones (no carry)
    c8=tests/gpu/test_triton_contract_8b.py
    part s32_tests 320 PART=tests TEST_TIMEOUT=310 \
        TESTS="$c8::test_matmul_rows_and_launch_choices[o] $c8::test_matmul_rows_and_launch_choices[qkv]"
    test_summary s32_tests 20
    bench mm90_sweep 220 benchmarks/triton/matmul_sweep.py sm90 --m 192,384,768 --shapes o,down,qkv,gate_up
    grep -E "M=" "$ROOT_OUT/mm90_sweep.log" | cut -c1-1400
    ;;
s32b)
    # the split-K launches' second kernel (decode sizes): the whole launch and the fold kernel alone, per
    # row-parallel shape (what folding in the first kernel could save at most; no carry)
    bench split_cost 120 benchmarks/triton/matmul_fold_cost.py --split --m 1,16,32,64,128,256
    grep -E "M=" "$ROOT_OUT/split_cost.log" | cut -c1-220
    # and the plain Gluon forms at the head's shape (the same loader and consumers as the head's statistics kernel,
    # without its epilogue): the head forward's gap to cuBLAS split into the matmul's and the epilogue's
    bench mm90_head 180 benchmarks/triton/matmul_sweep.py sm90 --m 2048,16384 --shapes lm_head
    grep -E "M=" "$ROOT_OUT/mm90_head.log" | cut -c1-1400
    # then the plain Gluon forms at the 1.7B plain layers (session 33 timed them at 8B only; gate_up 1.7B at 192-768
    # rows 1.18-1.46x on Triton tiles), each checked bitwise the default
    bench mm90_17b 200 benchmarks/triton/matmul_sweep.py sm90 --m 128,192,256,384,768 --shapes qkv_1.7b,gate_up_1.7b
    grep -E "M=" "$ROOT_OUT/mm90_17b.log" | cut -c1-1400
    ;;
s33)
    # session 33's defaults (grouped 257-768 rows: Launch.tail; qkv 8B 513-768: 128 x 256 Gluon tiles with a tail;
    # gate_up 8B 129-768: 128 x 128 Gluon tiles, one K-group) and the 192-row tiles at 128 registers a thread: the
    # bits of every candidate and default of the four 8B layers (a hang fails at the test's timeout), then the
    # 192-row forms timed where they could win (o 768 rows: 1.94 waves; gate_up 384: 2.9) (no carry)
    matmul_bits s33_tests 470
    bench mm90_192 100 benchmarks/triton/matmul_sweep.py sm90 --m 384,768 --shapes o,gate_up
    grep -E "M=" "$ROOT_OUT/mm90_192.log" | cut -c1-1400
    ;;
s33b)
    # session 33's defaults with the 192-row tiles (grouped 257-384 rows: 192 x 64; gate_up 8B 257-768: 192 x 128):
    # every sm90 form against them at the range's edges, each checked bitwise the default (o, down, qkv, gate_up),
    # then the whole matmul table against cuBLAS (nine shapes, M = 1-8192, defaults only) (no carry)
    bench mm90_edges 250 benchmarks/triton/matmul_sweep.py sm90 --m 256,320,384,448,512,640,1024 \
        --shapes o,down,gate_up,qkv
    grep -E "M=" "$ROOT_OUT/mm90_edges.log" | cut -c1-1400
    matmul_table 250
    ;;
s33c)
    # session 33's final defaults (qkv 8B 257-320: Triton 64 x 128 grid, 321-384: 192 x 128 Gluon; gate_up 8B
    # 257-384 and 641-768: 192 x 128): the four 8B layers' launch-choice bits, rows now checked at every bucket from
    # 255 to 768 (no carry)
    matmul_bits s33c_tests 330
    ;;
s34)
    # session 34's 1.7B defaults (qkv 129-256: Triton 64 x 128 grid, 577-768: 192 x 128 Gluon; gate_up 129-192,
    # 257-384, 577-768: 192 x 128 Gluon): every M at the 1.7B buckets' edges against the 4096-row product, every sm90
    # form at 160-768 rows each checked bitwise the default, then the whole matmul table against cuBLAS (no carry)
    part s34_tests 200 PART=tests TEST_TIMEOUT=190 \
        TESTS=tests/gpu/test_triton_contract_8b.py K="test_matmul_rows_at_the_table_edges"
    test_summary s34_tests 12
    bench mm90_17b 150 benchmarks/triton/matmul_sweep.py sm90 --m 160,192,224,256,320,384,448,512,576,640,704,768 \
        --shapes qkv_1.7b,gate_up_1.7b
    grep -E "M=" "$ROOT_OUT/mm90_17b.log" | cut -c1-1400
    matmul_table 230
    ;;
s34b)
    # session 34's final 1.7B defaults (gate_up 257-320: 64 x 256 Gluon, 385-512: 128 x 128 Gluon, 513-640: 128 x 256
    # Gluon; qkv 513-768: 192 x 128): the rows at every bucket edge, the sm90 forms at the changed buckets each checked
    # bitwise the default, then the RL-shaped rollout at 1.7B, rlk against stock (carry .vllm-cuda)
    part s34b_tests 90 PART=tests TEST_TIMEOUT=80 \
        TESTS=tests/gpu/test_triton_contract_8b.py K="test_matmul_rows_at_the_table_edges"
    test_summary s34b_tests 12
    bench mm90_17b_final 100 benchmarks/triton/matmul_sweep.py sm90 --m 288,320,448,512,544,576,640 \
        --shapes qkv_1.7b,gate_up_1.7b
    grep -E "M=" "$ROOT_OUT/mm90_17b_final.log" | cut -c1-1400
    part varied_1.7b 390 PART=vllm SHAPE=1.7b ENGINES=rlk,stock \
        VLLM_ARGS="--varied --n 384 --max-tokens 384 --max-num-seqs 256 --prompt-len 256 --limit 150"
    tail -8 "$ROOT_OUT/varied_1.7b.log"
    ;;
decode17)
    # where the 1.7B decode step's time goes (batch 1 at 1.10x stock in session 34): the GPU kernels of a decode step
    # at batch 1 and 64, rlk against stock, per kernel name (``vllm_cuda.py --profile``; carry .vllm-cuda)
    part decode_1.7b 480 PART=vllm SHAPE=1.7b ENGINES=rlk,stock VLLM_ARGS="--profile --limit 200"
    tail -40 "$ROOT_OUT/decode_1.7b.log"
    ;;
cold)
    # the whole matmul table twice at each point: the weight called back to back (the table's rows; one under L2's
    # 50 MB is then read from L2) and out of L2 as in a model step (``--cold``) (no carry)
    matmul_table 560 --cold
    ;;
s35)
    # the Gluon 64 x 64 tiles (a candidate since session 34, built on the CPU): their bits with every grouped
    # candidate (o, down at 8B), then every sm90 form where N is narrow and the tiles few (o/down 1.7B at 128-768
    # rows, o/down 8B at 640-768), each checked bitwise the default (no carry)
    [ "${SKIP_BITS:-0}" = 1 ] || matmul_bits s35_tests 250 o down
    bench mm90_narrow 200 benchmarks/triton/matmul_sweep.py sm90 --m 128,192,256,384,512,640,768 \
        --shapes o_1.7b,down_1.7b,o,down
    grep -E "M=" "$ROOT_OUT/mm90_narrow.log" | cut -c1-1400
    # and in one K-group at qkv 1.7B's rows where no form was under 1.19x (session 34)
    bench mm90_qkv17 100 benchmarks/triton/matmul_sweep.py sm90 --m 160,256,288,320,384 --shapes qkv_1.7b
    grep -E "M=" "$ROOT_OUT/mm90_qkv17.log" | cut -c1-1400
    if [ "${COLD:-0}" = 1 ]; then  # then #17's five shapes timed L2-hot (the table's rows) and L2-cold
        matmul_table 250 --cold --shapes qkv,o,gate_up,down,lm_head
    fi
    ;;
s35h)
    # the head statistics kernel's epilogue skipping its two dead steps (the mask past V outside the last vocab tile,
    # the target's select-sum in tiles without a target): every output's digest and time under the revision before
    # (.probe_old) and this one in the same call (head_epilogue_probe.py --against), then the head's GPU tests
    # natively (the Gluon forms against the Triton kernel, rows, full log-probs, gradients, graphs; carry .probe_old)
    head_probe 170
    grep -E "module|same bits|BITS|BITS SAME" "$ROOT_OUT/head_new.log" | cut -c1-170 | head -60
    part head_tests 200 PART=tests TEST_TIMEOUT=190 \
        TESTS="tests/gpu/test_triton_contract_8b.py tests/ops/triton/test_kernels.py" \
        K="head and not launch_choices and not accumulate"
    test_summary head_tests 40
    matmul_bits s35_tests 230 o down
    ;;
s35g)
    # where the graphed head forward's 1.12-1.20x cuBLAS at 1-128 rows goes (session 35): per replay, each kernel's
    # time and the GPU's idle time between kernels, against the matmul's (no carry)
    bench head_split 150 benchmarks/triton/head_sweep.py --graph-split 1,16,128
    grep -E "^T=" "$ROOT_OUT/head_split.log" | cut -c1-1500
    tail -5 "$ROOT_OUT/head_split.log"
    ;;
s36)
    # a change to the head against the package before it (.probe_old, carried; session 36: the shard-local targets
    # in the stats kernel, one tree launch a shard): every output's digest and time, the forward's stages, the head's
    # tests natively (the fused tree against the two, the vocab shards against TP=1), then the graphed forward's
    # kernels at 1-128 rows (session 35: 15 small kernels beside the stats kernel; session 36: 8)
    head_probe 170
    grep -E "forward|BITS|stages|  row" "$ROOT_OUT/head_new.log" | cut -c1-170 | head -60
    [ "${PROBE_ONLY:-0}" = 1 ] && exit 0  # PROBE_ONLY=1: the probe alone
    part head_tests 280 PART=tests TEST_TIMEOUT=270 \
        TESTS="tests/gpu/test_triton_contract_8b.py tests/ops/triton/test_kernels.py" \
        K="(head and not launch_choices and not accumulate) or shard_tree or vocab_shards"
    test_summary head_tests 12
    bench head_split 200 benchmarks/triton/head_sweep.py --graph-split 1,16,128  # with its candidates up to 64 rows
    grep -E "^T=" "$ROOT_OUT/head_split.log" | cut -c1-300
    ;;
s37)
    # a head change that cannot move the bits (session 37: the stats kernel's K slots at 64-row tiles) against the
    # package before it (.probe_old, carried; and .vllm-cuda): every output's digest and time, the graphed forward's
    # kernels with the slot candidates, then rlk-verify inside CUDA vLLM (its sampling head keeps the logits: the
    # stats kernel's other build) for Qwen3 at 64-sequence batches and chunked prefill
    head_probe 170
    grep -E "forward|BITS" "$ROOT_OUT/head_new.log" | cut -c1-170 | head -20
    bench head_split 200 benchmarks/triton/head_sweep.py --graph-split 1,16,128
    grep -E "^T=" "$ROOT_OUT/head_split.log" | cut -c1-300
    verify_qwen3 vllm_head
    ;;
s38)
    # the head's eager forward + backward at small T (session 37: 1.80x torch at 128 rows, ~2 ms of 2.4 in the
    # backward): its kernels and idle time against torch's, and the dh product's launch candidates (bits, time),
    # under the package before session 37's dW-buffer change (.probe_old: `git archive 53c7594 rlk_models | tar -x
    # -C .probe_old`; carried) and this tree's
    mkdir -p "$ROOT_OUT/bwd_old"
    OUT="$ROOT_OUT/bwd_old" PYTHONPATH="$PWD/.probe_old" timeout 200 python3 benchmarks/triton/head_sweep.py \
        --backward-split 128,256,512 > "$ROOT_OUT/bwd_old.log" 2>&1
    echo "bwd_old exit $?"
    bench bwd_new 200 benchmarks/triton/head_sweep.py --backward-split 128,256,512
    grep -E "^T=" "$ROOT_OUT/bwd_old.log" "$ROOT_OUT/bwd_new.log" | cut -c1-600
    ;;
s38b)
    # session 38's second call: the head backward at 128-512 rows with the targets' range read after the kernels are
    # queued (no sync), its host time and profile, and dh split-K candidates; then the head's GPU tests natively (the
    # dW buffer, the sync-free targets check) and the ragged K-groups' bits with TMA loads
    bench bwd 240 benchmarks/triton/head_sweep.py --backward-split 128,256,512,1024
    grep -E "^T=" "$ROOT_OUT/bwd.log" | cut -c1-900
    part head_tests 240 PART=tests TEST_TIMEOUT=230 \
        TESTS="tests/gpu/test_triton_contract_8b.py tests/ops/triton/test_kernels.py" \
        K="(head and not launch_choices and not accumulate) or shard_tree or vocab_shards or ragged_groups"
    test_summary head_tests 14
    ;;
s39fold)
    # docs/pending/s38-fold-norm.mbox applied (`git am`): its kernel tests natively (the partials through the norm,
    # the vLLM method, the split-K folds and the TP partials whose fold kernel now shares its code), the 8B
    # row-parallel layers' launch bits, and rlk-verify inside CUDA vLLM for Qwen3 (carry .vllm-cuda); then
    # CALL=decode17 for the 1.7B decode step's kernels against stock (the fold launches should be gone)
    part fold_tests 120 PART=tests TEST_TIMEOUT=110 TESTS=tests/ops/triton/test_kernels.py \
        K="unfolded_partials or vllm_row_parallel_method or row_parallel or ragged_groups or tensor_parallel"
    test_summary fold_tests 14
    matmul_bits fold_bits 160 o down
    verify_qwen3 vllm_fold
    ;;
s40graphs)
    # session 39's head-graphs series (merged in session 40): the vLLM class's head graphs up to 256 rows in one shared
    # buffer: the graphs against the eager head and full_logprobs(out=) natively, then rlk-verify inside CUDA vLLM for
    # Qwen3 (batches of 64 and 256 sequences take the new sizes; carry .vllm-cuda); then CALL=decode17 for the
    # batch-256 step against stock
    part graph_tests 200 PART=tests TEST_TIMEOUT=190 \
        TESTS="tests/gpu/test_triton_contract_8b.py tests/ops/triton/test_kernels.py tests/ops/test_contract.py" \
        K="head_graphs or head_rows_invariant or vocab_shards or full_logprobs"
    test_summary graph_tests 20
    verify_qwen3 vllm_graphs
    ;;
s40compiled)
    # vLLM's opt-in compiled path (rlk_compile: the decoder under torch.compile, ops as rlk::* custom ops) after session
    # 39's fix (the opaque backend hides linear_unfolded, whose Partials no custom op takes): rlk-verify's `compiled`
    # and `compiled_piecewise_graphs` configurations for Qwen3, 0 mismatches needed (carry .vllm-cuda)
    part vllm_compiled 540 PART=tests TESTS=tests/gpu/test_vllm_cuda.py K="qwen3 and not tp2 and compiled" \
        TEST_TIMEOUT=300
    test_summary vllm_compiled 12
    ;;
b1ab)
    # session 40 measured batch-1 TPOT at 1.096-1.107x stock (session 39: 1.00-1.065x) at the same GPU kernel time;
    # the head graphs to 256 rows (one shared buffer) came between. The package before them (.probe_old: rlk_models
    # at 53d9de3, `git archive 53d9de3 rlk_models | tar -x -C .probe_old`) first on PYTHONPATH for its engine, then
    # this tree's rlk and stock; each engine in its own process, the same checkpoint
    part b1_old 300 PART=vllm SHAPE=1.7b ENGINES=rlk VLLM_ARGS="--limit 200" PYTHONPATH_FIRST="$PWD/.probe_old"
    part b1_new 420 PART=vllm SHAPE=1.7b ENGINES=rlk,stock VLLM_ARGS="--limit 200"
    grep -hE '"(batch1_itl_ms|batch1_tpot_ms|batch1_ttft_ms|tok_per_s)"' "$ROOT_OUT"/b1_*/vllm_cuda_1.7b.json
    ;;
s41bk)
    # Launch.block_k=128 (session 40, CPU-built: twice the MMAs a pipeline step, no spill): every candidate form with
    # it against the default at 6 layer shapes (the first test compiles the forms, the rest reuse them; a hang fails
    # at the test's timeout)
    part bk_bits 540 PART=tests TEST_TIMEOUT=300 TESTS=tests/gpu/test_triton_contract_8b.py \
        K="wide_k_loads and 128"
    test_summary bk_bits 12
    ;;
s41bk2)
    # then the search at the rows where qkv sits on its ~250 ns-a-K-tile floor (1.7B: 1.38-1.63x cuBLAS; 8B:
    # 1.11-1.20x), every candidate with 64- and 128-wide loads, each timed launch checked bitwise against the default
    bench bk_search 540 benchmarks/triton/matmul_sweep.py --search --quick --m 1,16,64 --shapes qkv_1.7b,qkv \
        --block-k 64,128
    grep -E "search:|graph:|BITS|skip" "$ROOT_OUT/bk_search.log" | cut -c1-200 | head -40
    ;;
s41bk3)
    # session 41's second search with 128-wide K loads (s41bk2 found qkv at 1-64 rows 1.39-1.58x -> 1.03-1.20x cuBLAS
    # at 1.7B, 1.09-1.21x -> 0.97-1.02x at 8B): the rows between and above (qkv at 32 and 128), and the other
    # weight-streaming small-M layers (gate_up at 1-64, o/down 1.7B at 1-64); 128-wide candidates only, the default
    # timed beside them, each timed launch checked bitwise against the default
    bench bk_search_qkv 200 benchmarks/triton/matmul_sweep.py --search --quick --m 32,128 --shapes qkv_1.7b,qkv \
        --block-k 128
    bench bk_search_rest 340 benchmarks/triton/matmul_sweep.py --search --quick --m 1,16,64 \
        --shapes gate_up_1.7b,gate_up,o_1.7b,down_1.7b --block-k 128
    grep -hE "search:|graph:|BITS|skip" "$ROOT_OUT"/bk_search_*.log | cut -c1-200 | head -60
    ;;
s41v)
    # session 41's 128-wide K-load defaults (qkv 1.7B to 128 rows, qkv 8B to 64, gate_up, o and down 1.7B to 16, o
    # 1.7B to 64): the 1.7B rollout in CUDA vLLM, rlk (then its log-probs against the training class's) and stock,
    # then every layer's rows at its table edges and against the 64-wide pointer kernel (carry .vllm-cuda)
    part vllm_1.7b 330 PART=vllm SHAPE=1.7b ENGINES=rlk,stock VLLM_ARGS="--limit 160"
    vllm_figures vllm_1.7b 1.7b
    table_edges 200
    ;;
s42v)
    # session 41's 128-wide K-load defaults in CUDA vLLM, paired: the 1.7B rollout, rlk (then its log-probs against the
    # training class's) and stock, each engine given the time to compile its Triton launches on a cold cache (s41v's
    # 160 s was not) (carry .vllm-cuda)
    part vllm_1.7b 570 PART=vllm SHAPE=1.7b ENGINES=rlk,stock VLLM_ARGS="--limit 250"
    vllm_figures vllm_1.7b 1.7b
    ;;
s42bk)
    # 256-wide K loads (four K-tiles a pipeline step, one dot; CPU-built in session 41: four times the MMAs of the
    # 64-wide form, no spill): their bits at 6 layer shapes, 1 and 64 rows, against the pointer kernel; then the
    # small-M search with 128- and 256-wide loads where 128 left the most (qkv 1.7B 1.09-1.20x, o 1.7B 1.09-1.18x)
    part bk256_bits 300 PART=tests TEST_TIMEOUT=290 TESTS=tests/gpu/test_triton_contract_8b.py \
        K="wide_k_loads and 256"
    test_summary bk256_bits 8
    bench bk256_search 260 benchmarks/triton/matmul_sweep.py --search --quick --m 1,16,32,64 \
        --shapes qkv_1.7b,o_1.7b --block-k 128,256
    grep -hE "search:|graph:|BITS|skip" "$ROOT_OUT"/bk256_search.log | cut -c1-200 | head -30
    ;;
s42d)
    # session 42's defaults (256-wide loads at qkv 1.7B to 64 rows and o 1.7B at 17-32; 128-wide at o/down 1.7B to
    # 256, gate_up 1.7B at 193-256): the table edges' bits first, then the changed rows timed against cuBLAS, then the
    # 1.7B rollout in CUDA vLLM, rlk only, with its parity against the training class (carry .vllm-cuda)
    table_edges 150
    bench rows42 110 benchmarks/triton/matmul_sweep.py --m 1,16,32,64,128,256 \
        --shapes qkv_1.7b,o_1.7b,down_1.7b,gate_up_1.7b
    grep -hE "graph:|BITS|skip" "$ROOT_OUT"/rows42.log | cut -c1-200 | head -30
    part vllm_rlk 320 PART=vllm SHAPE=1.7b ENGINES=rlk VLLM_ARGS="--limit 200 --n 64 --max-tokens 256"
    vllm_figures vllm_rlk 1.7b
    ;;
s43g)
    # session 42 (CPU-built: twice the k16 wgmmas a slot, no spill, <= 227 KiB): the Gluon form (the default above 256
    # rows for o/down, at 192-768 for the plain layers) with 128-wide K slots, fewer and larger (3 for 128 x 128
    # tiles, not 5): half the K steps' barrier waits and consumer hand-offs. Timed (each form checked bitwise against
    # the default at every point) where the layers miss #17's goal: the row-parallel ones from 4096 rows (1.06-1.10x)
    # and o 1.7B at 256-512, the plain ones at 256 (1.7B: 1.18-1.19x) and 384/768; then CALL=s43gbits
    for fam in 8b 1.7b; do  # one JSON a family: a part cut at its limit saves nothing
        # the misses: 8B at 768 (down 1.16-1.17x; its 512 rows are in the goal), 1.7B at 512 (o 1.20x)
        shapes=o,down ms=256,768,1024,4096,8192
        [ "$fam" = 1.7b ] && shapes=o_1.7b,down_1.7b ms=256,512,1024,4096,8192
        bench "g128_rp_$fam" 160 benchmarks/triton/matmul_sweep.py sm90 --block-k 64,128 --m "$ms" --shapes "$shapes"
        grep -hE " M=" "$ROOT_OUT/g128_rp_$fam.log" | cut -c1-400 | head -10
    done
    bench g128_plain 200 benchmarks/triton/matmul_sweep.py sm90 --block-k 64,128 --m 256,384,768 \
        --shapes qkv,gate_up,qkv_1.7b,gate_up_1.7b
    grep -hE " M=" "$ROOT_OUT"/g128_plain.log | cut -c1-400 | head -12
    ;;
s43gbits)
    # the wide loads' GPU bits test at 128: every Triton candidate and form, and every Gluon candidate with 128-wide
    # K slots (bias, fp32 out, a TP=2 rank's half of K), against the 64-wide pointer kernel (no carry)
    # XDIST: its 6 items (one a layer shape) compile beside each other (session 42's 256-wide run: 6 items in 202 s
    # one after another, nearly all of it compiling)
    part g128_bits 560 PART=tests TEST_TIMEOUT=550 XDIST=6 TESTS=tests/gpu/test_triton_contract_8b.py \
        K="wide_k_loads and 128"
    test_summary g128_bits 8
    ;;
s43edges)
    # after a TUNED change: every layer's rows at its table edges against the 64-wide pointer kernel (8 items, one a
    # layer shape, compiled side by side), then the table's graph rows (the 17 M of matmul_table, no eager or
    # backward rows, which at the 8B shapes would not fit the limit) of SHAPES43 (no carry)
    table_edges 200 XDIST=8
    bench rows43 240 benchmarks/triton/matmul_sweep.py --quick \
        --m 1,2,4,8,16,32,64,128,192,256,384,512,768,1024,2048,4096,8192 \
        --shapes "${SHAPES43:-qkv_1.7b,o_1.7b,down_1.7b,gate_up_1.7b}"
    grep -hE "graph:|BITS|skip" "$ROOT_OUT"/rows43.log | cut -c1-200 | head -70
    ;;
s47)
    # session 46's plan in one call: every layer's rows at its table edges (the qkv 1.7B 129-192 row's 129-row edge has
    # not run under TUNED, session 45), then the whole table's graph rows (nine shapes x 17 M: last whole in session
    # 34, qkv 8B's last in sessions 34-41) with the kernels each side ran (--kernels: which kernel cuBLAS picked), then
    # #17's count and why each miss misses (``explain``: our tiles and waves, bytes and FLOPs a second, cuBLAS's
    # kernels) (no carry)
    table_edges 200 XDIST=8
    table_explained 370
    ;;
s47layer)
    # the row-parallel layers as the engine runs them (--layer: the product, then the residual add + RMSNorm with a
    # split launch's fold inside it) against cuBLAS's product into the same norm, beside the plain graph rows: what
    # the decode sizes' fold launches cost the engine (o 8B at 64 rows: 1.22x as a product alone, session 45), then
    # #17's count of both (no carry)
    bench layer47 300 benchmarks/triton/matmul_sweep.py --quick --layer \
        --m 1,2,4,8,16,32,64,128,192,256,384,512,768,1024,2048,4096,8192 --shapes o,down,o_1.7b,down_1.7b
    grep -hE "graph:|layer:" "$ROOT_OUT"/layer47.log | cut -c1-120
    for row in "" --layer; do
        PYTHONPATH="$PWD" python3 benchmarks/triton/matmul_sweep.py goal "$ROOT_OUT/layer47/matmul_sweep.json" $row |
            tail -2
    done
    ;;
s43rows8b)
    # the 8B layers' small- and mid-M misses in session 34's table (not re-run since) searched with 128- and
    # 256-wide loads, which took the 1.7B layers' small-M points into the goal (sessions 41-42): o 8B at 64 rows
    # (1.36x), gate_up 8B at 32 and 192 (1.18-1.25x), qkv 8B at 192 (1.28-1.33x); and qkv 1.7B at 256 (1.18x: its
    # 64 x 128 tiles, untouched since session 34). One bench a layer, so one cut at its limit loses only its own JSON
    # (no carry; winners into $ROOT_OUT/launches.json: search_into_file)
    search_into_file r8_o 150 --m 64 --shapes o --block-k 128,256
    search_into_file r8_gate_up 140 --m 32,192 --shapes gate_up --block-k 128,256
    search_into_file r8_qkv 90 --m 192 --shapes qkv --block-k 128,256
    search_into_file r17_qkv 90 --m 256 --shapes qkv_1.7b --block-k 128,256
    # the plain lm_head at 192 rows (1.41-1.48x: 128-row tiles, the second half padding) against the Gluon form's
    # 192 x 128 tiles (three consumers; proven at every layer shape at 64-wide slots, the only width here)
    search_into_file r8_lm_head 80 --m 192 --shapes lm_head --block-k 64 --tiles 64x128,128x128,128x256,192x128,64x256
    search_summary "$ROOT_OUT"/r8_*.log "$ROOT_OUT"/r17_qkv.log
    ;;
s44park)
    # session 44's parked 192 x 128 K-group form (bitwise, 1.07-1.55x the default's time: dropped, commit b0bd2b9 has
    # it; the call now times the Gluon K-group forms left): every Gluon K-group form at the row-parallel layers'
    # large M, each checked bitwise against the default at each point, timed against cuBLAS; then its bits with a
    # bias, fp32 out and a TP=2 rank's half of K (the launch-choices test at o and down, 1-8192 rows, side by side)
    # (no carry)
    # (768 at 8B: 4 rows of 192-row tiles x 32 are 128 tiles, one wave of 132, where the 128-row ones run 1.45
    # waves and the 128-row form with its tail measured 1.14-1.17x at o/down 8B)
    bench park_sweep 230 benchmarks/triton/matmul_sweep.py sm90 --m 768,1024,2048,4096,8192,16384
    grep -E "M=" "$ROOT_OUT/park_sweep.log" | cut -c1-400
    XDIST=2 matmul_bits park_bits 300 o down
    ;;
s44rows256)
    # the 8B engine's batch-256 decode step (1.07-1.08x stock's GPU time, s29-s31; 256 x 512 throughput 0.891x, s29):
    # its four layers at 256 rows (qkv 1.13x, o 1.08x, gate_up 1.04x, down 1.10x in s34's table), never searched with
    # 128- or 256-wide loads at 8B; winners by > 4% into $ROOT_OUT/launches.json, for CALL=s44prove (no carry)
    search_into_file r256_plain 270 --m 256 --shapes qkv,gate_up --block-k 128,256
    search_into_file r256_rp 270 --m 256 --shapes o,down --block-k 128,256
    search_summary "$ROOT_OUT"/r256_*.log
    ;;
s44prove)
    # a search's launch file (s43rows8b's launches.json, carried as .tuned/launches.json) as the default, with no code
    # edit (RLK_MATMUL_LAUNCHES): every layer's rows at its table edges and the file's own against the 4096-row
    # product and the 64-wide pointer kernel (8 items side by side), then its layers at its rows, the built-in
    # tables' defaults and the file's timed against cuBLAS in the same call (carry .tuned)
    prove_launches "$PWD/.tuned/launches.json" || { echo "carry .tuned"; exit 1; }
    ;;
s45rows)
    # session 45's two searches (run there as inline commands, calls 5 and 7): qkv 1.7B at 192 and 384 rows (1.15 /
    # 1.19x in the table's graph rows) with 64-, 128- and 256-wide loads, then o/down 8B at 384 (the Gluon form with
    # its tail, 1.10-1.17x) against the Triton forms at 64/128-wide loads (the search weighs the Gluon K-group forms
    # too since: CALL=s46rp); winners by > 4% into $ROOT_OUT/launches.json, for CALL=s44prove (no carry)
    search_into_file s45q 230 --m 192,384 --shapes qkv_1.7b --block-k 64,128,256
    search_into_file s45rp 300 --m 384 --shapes o,down --block-k 64,128
    search_summary "$ROOT_OUT"/s45*.log
    ;;
s46rp)
    # the row-parallel 8B layers where the Gluon form with its tail misses (o at 384 / 768 1.17x, down at 768 1.17x,
    # session 45): the search now weighs the Gluon K-group forms too (192 x 64 tiles: 128 of them at 384 rows, one
    # wave of 132 SMs, where 128 x 128 gives 96), at 64- and 128-wide K; one bench a layer, winners by > 4% into
    # $ROOT_OUT/launches.json, for CALL=s44prove (no carry)
    for layer in o down; do
        search_into_file "s46_$layer" 280 --m 384,768 --shapes "$layer" --block-k 64,128
    done
    search_summary "$ROOT_OUT"/s46_*.log
    ;;
s43rows)
    # session 42 left: qkv 1.7B's swap launch at 64 rows bimodal run to run (0.94x / 1.07x, the plain tile 0.98-0.99x
    # in both), so the 8 fastest at 48 and 64 rows timed again 7 rounds round-robin (--retime); then the row-parallel 1.7B layers where the Gluon
    # form misses (o 1.7B 1.20x at 512, o/down 1.7B 1.07-1.10x at 4096) against the Triton forms with 128-wide loads
    # (winners by > 4% into $ROOT_OUT/launches.json, for CALL=s44prove)
    bench q64 150 benchmarks/triton/matmul_sweep.py --search --quick --m 48,64 --shapes qkv_1.7b \
        --tiles 64x32,64x64 --block-k 256 --retime 8 --rounds 7 --write-launches "$ROOT_OUT/launches.json"
    grep -hE "search:|graph:|retimed:|BITS" "$ROOT_OUT/q64.log" | cut -c1-200
    bench rp_rows 300 benchmarks/triton/matmul_sweep.py --search --quick --m 384,512,4096 \
        --shapes o_1.7b,down_1.7b --block-k 64,128 --retime 4 --rounds 5 --write-launches "$ROOT_OUT/launches.json"
    grep -hE "search:|graph:|retimed:|BITS|skip" "$ROOT_OUT"/rp_rows.log | cut -c1-200 | head -30
    ;;
s42rows)
    # 128-wide K loads above 64 rows, at the row-parallel 1.7B layers' worst misses (o 1.7B 1.30/1.54x at 128/256
    # rows, down 1.7B 1.18x at 256) and qkv 8B / gate_up 1.7B at 128-256 (no carry)
    bench bk_rows 560 benchmarks/triton/matmul_sweep.py --search --quick --m 128,256 \
        --shapes o_1.7b,down_1.7b,qkv,gate_up_1.7b --block-k 64,128
    grep -hE "search:|graph:|BITS|skip" "$ROOT_OUT"/bk_rows.log | cut -c1-200 | head -30
    ;;
s38c)
    # session 38's third call: the backward with dh split-K at <= 256 rows and dh written in h's dtype, the sync-free
    # targets check: --backward-split, the main sweep's forward + backward against torch, and the changed ops' tests
    bench bwd 200 benchmarks/triton/head_sweep.py --backward-split 128,256,512,1024
    grep -E "^T=" "$ROOT_OUT/bwd.log" | cut -c1-400
    bench head_main 260 benchmarks/triton/head_sweep.py
    grep -E "^M=" "$ROOT_OUT/head_main.log" | cut -c1-200
    python3 - "$ROOT_OUT/head_main/head_sweep.json" <<'PY'
import json, sys
for k, v in json.load(open(sys.argv[1])).items():
    if isinstance(v, dict) and "fwd_bwd_ours_us" in v:
        print(k, "fwd+bwd ours", round(v["fwd_bwd_ours_us"], 1), "torch", round(v["fwd_bwd_torch_us"], 1),
              "ratio", round(v["ratio_fwd_bwd_vs_torch"], 3), "recompute ratio", round(v["ratio_fwd_bwd_recompute_vs_torch"], 3))
PY
    part head_tests 200 PART=tests TEST_TIMEOUT=190 \
        TESTS="tests/gpu/test_triton_contract_8b.py tests/ops/triton/test_kernels.py" \
        K="ragged_groups or dh_split or refuses_targets or kept_probs or logprob_head_rows or head_stats_sm90"
    test_summary head_tests 14
    ;;
s36t)
    # session 36's second proof, after the trees' merges were written as one FMA form (_pair): the head's tests
    # natively (the fused tree against the two over 4,096 rows, the vocab shards against TP=1 at Qwen3's vocabulary),
    # then rlk-verify inside CUDA vLLM for Qwen3 at 64-sequence batches and chunked prefill (carry .vllm-cuda)
    part head_tests 200 PART=tests TEST_TIMEOUT=190 \
        TESTS="tests/gpu/test_triton_contract_8b.py tests/ops/triton/test_kernels.py" \
        K="(head and not launch_choices and not accumulate) or shard_tree or vocab_shards"
    test_summary head_tests 12
    verify_qwen3 vllm_head
    ;;
qkcheck)
    # the hypothesis contract tests of the fused q/k norm + RoPE natively, to completion (a failing example is
    # printed); TRAIN=1: then the 8B step
    part qk_contract 110 PART=tests TESTS=tests/ops/test_contract.py K="qk_norm_rope_is or rms_norm_rope_is" \
        TEST_TIMEOUT=100
    grep -E "Falsifying|falsifying|^E |rows=|dtype=" "$ROOT_OUT/qk_contract/gpu_tests.log" | head -40
    if [ "${TRAIN:-0}" = 1 ]; then
        train_8b 190 "--steps 4 --profile --limit 75" 8
    fi
    ;;
halves)
    part halves 240 PART=halves
    part vllm_rest2 300 PART=tests TESTS=tests/gpu/test_vllm_cuda.py \
        K="not tp2 and (compiled or default_block or weight_sync)" TEST_TIMEOUT=140
    ;;
ds_final)
    part kept_ds_tests 150 PART=tests TESTS=tests/ops/triton/test_kernels.py \
        K="kept_ds or backward_candidates or tma_loads_are" TEST_TIMEOUT=140
    train_8b 170 "--steps 4 --profile --limit 60" 14
    ;;
ds)
    part attn_tests 150 PART=tests TESTS="tests/ops/triton/test_kernels.py tests/gpu/test_triton_contract_8b.py" \
        K="attention" TEST_TIMEOUT=140
    part attn_sweep 170 PART=sweep SKIP_OPS=1 SKIP_HEAD=1 SKIP_MATMUL=1 ATTN_ARGS=--train
    grep -E "^train|fwd default" "$ROOT_OUT/attn_sweep.log" | tail -30
    train_8b 240 "--steps 6 --profile --limit 110" 14
    ;;
engine)
    # ENGINE_KINDS: e.g. stock,rlk,stock_after (stock again after rlk: its drift within the call, and rlk against
    # the two stock runs' mean; session 45: stock's three 8B runs spread 29%)
    part engine_8b 580 PART=vllm SHAPE=8b ENGINES="${ENGINE_KINDS:-stock,rlk}" VLLM_ARGS="--limit 230 ${ENGINE_ARGS:-}"
    tail -40 "$ROOT_OUT/engine_8b.log"
    ;;
s49)
    # the landed ops (Launch.last_folds and Launch.streamk removed, session 48) on the GPU: every layer's rows at its
    # table edges (XDIST), then rlk-verify inside CUDA vLLM for Qwen3 (64-256-sequence batches, chunked prefill: 0
    # mismatching log-probs against the training class) (carry .vllm-cuda)
    table_edges 180 XDIST=8
    verify_qwen3 verify
    ;;
s50)
    # session 49's fold kernel (a program a row's block of columns; the bias's column no int64 remainder): every
    # layer's rows at its table edges (the split launches fold with it), then natively its sums and bias columns,
    # the TP shards' combine and the halves (no carry; session 50: launch_choices_and_rows, once selected here, compiles
    # every launch form natively and ran 3 of its 36 items in 200 s: the table edges cover the launch choices)
    table_edges 180 XDIST=8
    part folds 200 PART=tests TEST_TIMEOUT=190 TESTS=tests/ops/triton/test_kernels.py \
        K="fold_partials_folds or tensor_parallel_shards or row_parallel_adds"
    test_summary folds 12
    bench fold_cost 120 benchmarks/triton/matmul_fold_cost.py --split --m 1,16,32,64,128,256
    tail -20 "$ROOT_OUT/fold_cost.log"
    ;;
s50wide)
    # session 50's 192-column Gluon tiles (matmul_sm90.wide: 128 x 192 and 192 x 192, 128 tiles a wave at gate_up 8B's
    # 128 / 192 rows, qkv 8B's 512 / 768, gate_up 1.7B's 256 / 384): their bits natively, every layer's rows at its
    # table edges (the kernel's other forms gained two descriptor arguments, their code otherwise the same), then the
    # wide tiles searched against each point's default, retimed, winners by > 4% into the launch file (no carry)
    part wide 220 PART=tests TEST_TIMEOUT=210 TESTS=tests/gpu/test_triton_contract_8b.py K="wide_gluon_tiles"
    test_summary wide 12
    table_edges 150 XDIST=8
    search_into_file s50w 280 --m 128,192,256,384,512,768 --shapes qkv,gate_up,gate_up_1.7b --tiles 128x192,192x192 \
        --block-k 64,128
    search_summary "$ROOT_OUT"/s50w.log
    ;;
s51)
    # session 50's 96-column Gluon tiles (128 x 96 and 192 x 96, built on the CPU only) and its TUNED bounds: the wide
    # tiles' bits natively (14 forms), every layer's rows at its table edges (TUNED's new bounds at 160/161 and
    # 640/641 among them), then the 96-column tiles searched where they make 128 tiles -- qkv 8B at 192 rows (1.35x),
    # qkv 1.7B at 384 (1.22x), gate_up 1.7B at 192 (1.24x) -- winners into the launch file, proven and timed before
    # and after in the same call where there is time (no carry)
    part wide 220 PART=tests TEST_TIMEOUT=210 TESTS=tests/gpu/test_triton_contract_8b.py K="wide_gluon_tiles"
    test_summary wide 12
    table_edges 120 XDIST=8
    search_into_file s51w 200 --m 192,384 --shapes qkv,qkv_1.7b,gate_up_1.7b --tiles 128x96,192x96 --block-k 64,128
    search_summary "$ROOT_OUT"/s51w.log
    # the winners proven and timed in the same call (CALL=s44prove's steps), where the search wrote any and the call's
    # 600 s leave room (typically ~300 s have gone: session 50's wide test took 56 s for 6 forms, the edges 22-40 s)
    if [ -f "$ROOT_OUT/launches.json" ] && ((SECONDS < 320)); then
        prove_launches "$ROOT_OUT/launches.json" prove_ 80
    fi
    ;;
s52vllm)
    # the TUNED rows inside CUDA vLLM without the 8B engine's ~460 s: rlk-verify's budget_384_decode_192 (384-token
    # steps, then decode steps of up to 192 sequences) on 2-layer checkpoints of the 8B's and 1.7B's layer shapes (the
    # tiny checkpoints of CALL=s49's verify take the built-in table only); session 52, H100: 2 of 2 passed, 156 s.
    # Since session 53 the test also runs budget_768_decode_512 (CALL=s53vllm runs that alone) (carry .vllm-cuda)
    part tuned_vllm 420 PART=tests TESTS=tests/gpu/test_vllm_cuda.py K="tuned_layer_shapes" TEST_TIMEOUT=200
    test_summary tuned_vllm 12
    ;;
s53vllm)
    # qkv 8B's 385-768-row Gluon tiles (128 x 192, 128 x 256 with tail, 192 x 192) inside CUDA vLLM: rlk-verify's
    # budget_768_decode_512 (768-token steps, then decode steps of up to 512 sequences) on the 2-layer checkpoints of
    # the 8B's and 1.7B's layer shapes; session 53, H100: 2 of 2 passed, 151 s (carry .vllm-cuda)
    part tuned_vllm768 420 PART=tests TESTS=tests/gpu/test_vllm_cuda.py K="tuned_layer_shapes and budget_768" \
        TEST_TIMEOUT=240
    test_summary tuned_vllm768 12
    ;;
s53)
    # CALL=s52ab (for an H200), then, where the call's time allows, rlk-verify's budget_768_decode_512 on the tiny
    # checkpoints (test_rlk_verify_on_cuda_every_configuration's new rows; carry .vllm-cuda); session 53: ran on an
    # H100 (asked as nvidia-h200), 221 s, the edges 8 of 8, the tiny part cut at 150 s after qwen3 passed (CALL=s53tiny)
    NO_TAR=1 CALL=s52ab bash "$0"
    if ((SECONDS < 240)); then
        part tiny768 150 PART=tests TESTS=tests/gpu/test_vllm_cuda.py K="every_configuration and budget_768" \
            TEST_TIMEOUT=120
        test_summary tiny768 12
    fi
    ;;
s53tiny)
    # rlk-verify's budget_768_decode_512 on the tiny checkpoints (CALL=s53's second part, which its 150 s cut after
    # the first variant; session 53 ran the llama_bias row inline, 51 s) (carry .vllm-cuda)
    part tiny768 300 PART=tests TESTS=tests/gpu/test_vllm_cuda.py \
        K="every_configuration and budget_768 and not tp2 and ${TINY768_VARIANT:-(qwen3 or llama_bias)}" \
        TEST_TIMEOUT=170
    test_summary tiny768 12
    ;;
s53kern)
    # which kernels cuBLAS runs where o 1.7B misses most (192-768 rows, 1.28-1.48x on the H200, session 50), against
    # ours (--kernels), then ``explain --all``: a short call for a session's last device seconds (no carry)
    bench kern 80 benchmarks/triton/matmul_sweep.py --quick --kernels --m 192,256,384,512,768 --shapes o_1.7b
    grep -hE "graph:|kernels:" "$ROOT_OUT"/kern.log | cut -c1-240
    PYTHONPATH="$PWD" python3 benchmarks/triton/matmul_sweep.py explain "$ROOT_OUT/kern/matmul_sweep.json" --all |
        cut -c1-400
    ;;
s54w)
    # session 54's 128 x 96 tiles in K-groups (matmul_sm90.GROUPED_WIDE, built on the CPU only): their bits natively
    # (8 groups, a TP=2 and TP=4 rank's 4 and 2; o and down at 8B and 1.7B), then searched against each point's
    # default where they make 129-132 tiles and cuBLAS runs 128 x 96 -- o/down 8B at 384 rows, o/down 1.7B at 768 --
    # and at 512 (88 and 172 tiles), retimed, winners by > 4% into the launch file (no carry); CALL=s54prove proves
    # and times the file (carry .tuned)
    grouped_wide_then_search s54g 330 --m 384,512,768 --shapes o,down,o_1.7b,down_1.7b --tiles 128x96,128x128,64x128
    ;;
s54prove)
    # CALL=s54w's launch file (carried as .tuned/launches.json) as the default: every layer's rows at its table edges
    # and the file's own, then its layers at its rows before and after, timed against cuBLAS in one call
    prove_launches "$PWD/.tuned/launches.json" s54_ 150
    ;;
s54b)
    # session 54's TUNED rows (128 x 96 tiles in K-groups: o/down 1.7B at 768 rows, down 8B at 384; at first 641-768
    # and 257-384, the file's rows): every layer's rows at its table edges on them, then those rows against the
    # 128 x 128 tiles they replaced, given back as a launch file -- "before" is the current TUNED, "after" the old
    # tiles (at 257 and 641 rows both are the old tiles since the narrowing) -- timed in one call; on an H200 then
    # CALL=s47's table where the call's time allows, elsewhere a search (no carry)
    table_edges 120 XDIST=8
    prove_launches "$PWD/docs/data/matmul_launches_2026-12-06-s54-before-128x128.json" s54b_ 120
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        if ((SECONDS < 300)); then NO_TAR=1 CALL=s47 bash "$0"; fi
    elif ((SECONDS < 300)); then
        # elsewhere the 96-column tiles where they make one wave and were never searched: qkv 8B at 193-256 rows (2 x
        # 64 = 128 tiles of 128 x 96; 96 of the default's 128 x 128; cuBLAS 1.16x faster on the H100), and o 8B at 384
        # (128 x 96 in K-groups, 129 tiles: call s54w's retimed medians 1.14 against 1.16x, runs 22.4-24.5 us)
        search_into_file s54q 200 --m 224,256,384 --shapes qkv,o --tiles 128x96,128x128,64x128 --block-k 64,128
        search_summary "$ROOT_OUT"/s54q.log
    fi
    ;;
s54e)
    # session 54's sixth call (inline, recorded here; cut at its 250 s after the first point): the rows just past a
    # multiple of 128 that the table does not sample, where session 54's A/B found every form slow (down 8B at 257 /
    # 641 rows: 1.28-1.51x cuBLAS; o 1.7B at 641 1.06-1.16x), searched against each point's default, retimed, winners
    # by > 4% into the launch file (no carry)
    search_into_file s54e 400 --m 257,320,641,704 --shapes down,o_1.7b,down_1.7b --block-k 64,128
    search_summary "$ROOT_OUT"/s54e.log
    ;;
s55w)
    # session 55's 64 x 96 Gluon tiles split by columns (matmul_sm90.GROUPED_WIDE: a consumer's 48 columns as 32 + 16,
    # built on the CPU only): their bits natively in K-groups (8 groups, a TP=2 / TP=4 rank's 4 / 2; the K-group test's
    # 8 forms, session 54's 4 took 58 s), then searched where they make about a wave -- o/down 1.7B at 257 / 320 rows
    # (110 tiles; 64 x 128: 80; 1.37-1.54x cuBLAS on the H100) and o/down 8B at 192 (129 tiles) -- retimed, winners
    # by > 4% into the launch file (no carry); then CALL=s54prove's steps on the file where the call's time allows.
    # In one K-group (test_matmul_wide_gluon_tiles_give_the_plain_bits, 18 forms) it is a later call's
    grouped_wide_then_search s55w 220 --m 192,257,320 --shapes o,down,o_1.7b,down_1.7b --tiles 64x96,64x128,128x128
    if [ -f "$ROOT_OUT/launches.json" ] && ((SECONDS < 440)); then
        prove_launches "$ROOT_OUT/launches.json" s55w_ 120
    fi
    ;;
s55var)
    # why one launch's time moves between calls (session 55, H100: down 8B at 257 rows 70.2-87.1 us in five calls,
    # each call's rounds within 1%, cuBLAS 58.0-60.9): the product on 8 fresh copies of its operands at other
    # addresses in one process, 3 rounds each against cuBLAS, the GPU's clocks around each (matmul_variance.py;
    # no carry, ~100 s)
    bench var55 150 benchmarks/triton/matmul_variance.py --shape down --m 257 --allocs 8 --rounds 3
    grep -hE "copy|within" "$ROOT_OUT"/var55.log | cut -c1-240
    ;;
s56idle)
    # session 56's pass of a consumer whose 64 rows (or, split by columns, whose columns) lie past M (N): no dots, its
    # turns passed on (matmul_sm90.PASS_IDLE; built on the CPU). Its bits natively: the wide tiles in one K-group and
    # in K-groups (m = 1 and 700 leave a 128-row tile's second consumer idle, N = 2048 a 64 x 96 tile's second), every
    # layer's rows at its table edges (257, 320, 385...: the defaults' 128 x 128 tiles with one idle); then the pass
    # against the form before it on the same operands, 3 copies at other addresses, 3 rounds each (matmul_idle.py),
    # at the defaults and at 128 x 128 tiles on the 1.7B layers (their default at 257-320 is 64 x 128: none idle).
    # Ran at 399cda8 (bitwise, 17 of 17; slower by 6-18% where a consumer was idle), reverted after it: the pass and
    # matmul_idle.py are in that commit only
    part idle_bits 280 PART=tests TEST_TIMEOUT=270 TESTS=tests/gpu/test_triton_contract_8b.py XDIST=8 \
        K="wide_gluon_tiles or rows_at_the_table_edges"
    test_summary idle_bits 30
    bench idle56 160 benchmarks/triton/matmul_idle.py --shapes o,down,qkv,gate_up --m 256,257,320,384,449,700
    bench idle56_17 80 benchmarks/triton/matmul_idle.py --shapes o_1.7b,down_1.7b --m 257,320 \
        --launch "Launch((128, 128, 12, 5), sm90=True)"
    grep -hE "M=|Error|error" "$ROOT_OUT"/idle56.log "$ROOT_OUT"/idle56_17.log | cut -c1-230
    ;;
s56h200)
    # session 56's last call, for an H200 in about 200 s: the table edges on the current TUNED (session 54's 128 x 96
    # rows were proven on an H100 only), then those rows against the 128 x 128 tiles they replaced -- CALL=s54b without
    # its s47 table (no carry)
    # (that file's 128 x 128 tiles were proven on the H200 before session 54, so not its edges again here)
    old_tiles="$PWD/docs/data/matmul_launches_2026-12-06-s54-before-128x128.json"
    table_edges 90 XDIST=8
    read -r layers rows < <(launch_file_rows "$old_tiles")
    bench s54b_before 90 benchmarks/triton/matmul_sweep.py --quick --m "$rows" --shapes "$layers" --graph-rounds 3
    export RLK_MATMUL_LAUNCHES="$old_tiles"
    bench s54b_after 90 benchmarks/triton/matmul_sweep.py --quick --m "$rows" --shapes "$layers" --graph-rounds 3
    unset RLK_MATMUL_LAUNCHES
    grep -hE "graph:" "$ROOT_OUT"/s54b_before.log "$ROOT_OUT"/s54b_after.log | cut -c1-200
    ;;
s57h200)
    # session 57's first H200 call (no H200 since session 50): CALL=s56h200 (the table edges on the current TUNED,
    # session 54's 128 x 96 rows against the 128 x 128 tiles they replaced), then CALL=s47's whole table with
    # cuBLAS's kernels, #17's count and why each miss misses, without its edges again (no carry, ~450 s)
    NO_TAR=1 CALL=s56h200 bash "$0"
    table_explained 330
    ;;
s57search)
    # the H200's grid misses a search may reach: qkv 8B at 128 / 192 rows (session 50: 1.20 / 1.35x cuBLAS; the 96-column
    # Gluon tiles never searched on an H200: 64 x 96 makes 128 tiles at 128 rows, 128 x 96 128 at 192), winners by > 4%
    # into $ROOT_OUT/launches.json, then proven and timed before / after in the same call (prove_launches) where time
    # allows (no carry; ~400 s). o 8B at 64 rows (1.20x) runs session 43's search winner (256-wide K loads, split by
    # groups); o/down 8B at 4096-8192 (1.05-1.07x against 1.05x) need cuBLAS's two-SM clusters, not a search
    search_into_file s57q 200 --m 128,192 --shapes qkv --tiles 64x96,64x128,128x96,128x128,64x64,192x96 \
        --block-k 64,128
    search_summary "$ROOT_OUT"/s57*.log
    if [ -f "$ROOT_OUT/launches.json" ] && ((SECONDS < 330)); then
        prove_launches "$ROOT_OUT/launches.json" s57_ 90
    fi
    ;;
s58host)
    # what a small micro-batch's eager step costs the host: each op's queueing time against torch's, with the Python
    # profile of ours (host_time.py), then the 1.7B step at 1 x 1024 tokens with its kernels and the GPU's idle gaps
    # (carry .wheels; ~300 s)
    bench host58 120 benchmarks/triton/host_time.py
    grep -E "host per call| own " "$ROOT_OUT"/host58.log | cut -c1-160 | head -90
    part train_small 240 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,stock,liger --batch 1 --seq 1024 --profile"
    tail -60 "$ROOT_OUT/train_small.log" | cut -c1-220
    ;;
s58host2)
    # session 58: where an op's host time goes (host_time.py --breakdown: Triton's binder, cache key, globals check
    # and launcher, timed directly, and the rest, ours), under this tree's package and .probe_old's (`git archive REV
    # rlk_models | tar -x -C .probe_old`, carried), then the 1.7B step at 1 x 1024 tokens under each (no Liger)
    for side in new old; do
        pp=$([ $side = old ] && echo "$PWD/.probe_old" || echo "$PWD")
        mkdir -p "$ROOT_OUT/host_$side" "$ROOT_OUT/train_$side"
        OUT="$ROOT_OUT/host_$side" PYTHONPATH="$pp" timeout 120 python3 benchmarks/triton/host_time.py --breakdown \
            > "$ROOT_OUT/host_$side.log" 2>&1; echo "host_$side exit $?"
        grep -E "host per call|launches" "$ROOT_OUT/host_$side.log" | cut -c1-330
        stacks=$([ $side = new ] && echo rlk,stock || echo rlk)
        PYTHONPATH="$pp" timeout 200 python3 benchmarks/train_step.py --shape 1.7b --stacks $stacks --batch 1 \
            --seq 1024 --out "$ROOT_OUT/train_$side" > "$ROOT_OUT/train_$side.log" 2>&1; echo "train_$side exit $?"
        grep -hE "tok_per_s|step_ms|\"train\"|\"forward\"" "$ROOT_OUT/train_$side"/*.json | head -12
    done
    ;;
s59prove)
    # session 58's host-path changes (mm's cached launch plan, autograd skipped where nothing is recorded), which no
    # device call had run: rlk-verify inside CUDA vLLM at the 8B's tuned layer shapes (budget_768_decode_512 of
    # test_rlk_verify_on_cuda_at_the_tuned_layer_shapes), the dense ops' bits natively (EDGES_TOO=1: every layer's rows
    # at its table edges, 60 s more), and the graphed forward-only log-prob pass (cuda_graphs=True) against the eager
    # one: its tests first, its speed over 24 varied 1.7B micro-batches last (benchmarks/logprob_graphs.py) (carry
    # .vllm-cuda; ~370 s)
    part graphs 100 PART=tests TEST_TIMEOUT=95 XDIST=3 TESTS=tests/gpu/test_logprob_graphs_cuda.py
    test_summary graphs 16
    part tuned_vllm 130 PART=tests TESTS=tests/gpu/test_vllm_cuda.py K="tuned_layer_shapes and 8b and budget_768" \
        TEST_TIMEOUT=125
    test_summary tuned_vllm 12
    part dense 60 PART=tests TEST_TIMEOUT=55 XDIST=8 TESTS="tests/ops/triton/test_kernels.py tests/ops/test_contract.py" \
        K="linear or mm or matmul or outside or plan or embedding or silu"
    test_summary dense 8
    [ "${EDGES_TOO:-0}" = 1 ] && table_edges 60 XDIST=8
    bench graphs17 80 benchmarks/logprob_graphs.py --shape 1.7b --seqs 1
    grep -hE "eager|graphs" "$ROOT_OUT"/graphs17.log | cut -c1-300
    ;;
s59layer)
    # o / down 8B at 768 rows, every candidate timed as the layer runs it (matmul_sweep.py --search --layer: the
    # product, then the residual add + RMSNorm), against cuBLAS's layer; the 6 fastest retimed 5 rounds, a winner by
    # > 4% into $OUT/launches.json (session 58: the default's two-launch tail form is 1.34x cuBLAS there as a layer,
    # 1.18x as a product) (no carry; ~250 s)
    search_into_file layer768 300 --layer --m 768 --shapes o,down
    search_summary "$ROOT_OUT/layer768.log"
    ;;
s59step)
    # the graphed forward-only pass's speed: 24 varied micro-batches of 8 sequences at 1.7B, the 1.7B step at 1 x 1024
    # tokens (rlk with and without graphs, stock, Liger), then CALL=s58ab's host times in 2 rounds (carry .wheels and
    # .probe_old; ~450 s)
    bench graphs8 120 benchmarks/logprob_graphs.py --shape 1.7b --seqs 8
    grep -hE "eager|graphs" "$ROOT_OUT"/graphs8.log | cut -c1-300
    part train_small 220 PART=train TRAIN_SHAPES=1.7b TRAIN_ARGS="--stacks rlk,stock,liger --batch 1 --seq 1024"
    tail -40 "$ROOT_OUT/train_small.log" | cut -c1-220
    ROUNDS=2 NO_TAR=1 CALL=s58ab bash "$0"
    ;;
s60)
    # by the card: on an H200, CALL=s57search (qkv 8B at 128 / 192 rows searched, winners proven; ~400 s); on any other
    # card, the two test_kernels tests session 59 fixed for native runs (never run since), CALL=s59layer (o / down 8B
    # at 768 rows searched by layer timings) and the graphed forward-only pass at 8 sequences (no carry; ~480 s)
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        NO_TAR=1 CALL=s57search bash "$0"
    else
        part kfix 70 PART=tests TEST_TIMEOUT=65 XDIST=4 TESTS=tests/ops/triton/test_kernels.py \
            K="constexprs_follow_the_launch_not_m or block_k_runs_on_the_gpu_only"
        test_summary kfix 10
        NO_TAR=1 CALL=s59layer bash "$0"
        bench graphs8 120 benchmarks/logprob_graphs.py --shape 1.7b --seqs 8
        grep -hE "eager|graphs" "$ROOT_OUT"/graphs8.log | cut -c1-300
    fi
    ;;
s60train)
    # the graphed training pass (cuda_graphs=True with gradients: forward and backward graphs): its GPU tests (the
    # eager log-probs and padded-batch gradients bitwise, accumulation, the activations' guard), then (unless
    # TESTS_ONLY=1) the 1.7B step at 1 x 1024 tokens, rlk (eager, forward graphs, training graphs) against stock and
    # Liger (TRAIN_STACKS) (carry .wheels; ~400 s)
    part graphs 170 PART=tests TEST_TIMEOUT=165 XDIST=3 TESTS=tests/gpu/test_logprob_graphs_cuda.py
    test_summary graphs 30
    if [ "${TESTS_ONLY:-0}" != 1 ] && [ "${SKIP_STEP:-0}" != 1 ]; then  # SKIP_STEP=1: the tests and the sweep
        part train_small 220 PART=train TRAIN_SHAPES=1.7b \
            TRAIN_ARGS="--stacks ${TRAIN_STACKS:-rlk,stock,liger} --batch 1 --seq 1024"
        tail -40 "$ROOT_OUT/train_small.log" | cut -c1-220
    fi
    if [ "${TESTS_ONLY:-0}" != 1 ] && ((SECONDS < 420)); then
        bench graphs_train 120 benchmarks/logprob_graphs.py --shape 1.7b --seqs 1 --train --steps 12
        grep -hE "eager|graphs" "$ROOT_OUT"/graphs_train.log | cut -c1-300
    fi
    ;;
s63)
    # session 63: the weight push's multi-tensor check and load -- the CUDA weight-sync tests (the finiteness check
    # on CUDA tensors; parity after three pushes), push_weights.py by its parts (old and new in one run, tiny and
    # 0.6B) -- then, on an H200, CALL=s57search; on any other card, o 8B at 641-768 rows in one launch of 128 x 96
    # tiles (session 63's layer search won 768 by 11%) proven at the table edges and timed as a layer before / after
    # at 641, 704 and 768 rows; then, where time is left, the main job eager against graphed (CALL=s61grpo: the
    # push's share of a step) (carry .vllm-cuda; ~450 s, ~560 with the main job)
    part push_tests 150 PART=tests TESTS=tests/gpu/test_vllm_cuda.py K="weight_sync" TEST_TIMEOUT=140
    test_summary push_tests 8
    part push 150 PART=push
    cat "$ROOT_OUT"/push/push_weights_*.json
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        NO_TAR=1 CALL=s57search bash "$0"
    else
        PROVE_LAYER=1 PROVE_ROWS=641,704,768 prove_launches scripts/launch_candidates/s63_o_641_768.json s63_ 120
    fi
    if ((SECONDS < 330)); then
        NO_TAR=1 CALL=s61grpo bash "$0"
    fi
    ;;
s63b)
    # session 63's last call: the push's parts again at the 0.6B shape (the finiteness check's norms stacked per
    # group, not moved one by one), then RLKGRPOTrainer(cuda_graphs=True) for TRL_STEPS (default 12): its pushes'
    # seconds (rlk/sync_weights_s) and median step (carry .vllm-cuda and .wheels; ~230 s)
    part push 110 PART=push PUSH_SHAPES=0.6b
    cat "$ROOT_OUT"/push/push_weights_*.json
    part trl 200 PART=trl SKIP_PUSH=1 TRL_KINDS="rlk-graphs" TRL_STEPS="${TRL_STEPS:-12}" TRL_LIMIT=190 \
        TRL_ARGS="--sft-steps 100"
    grep -h RESULT "$ROOT_OUT"/trl/trl_*.log | cut -c1-400
    ;;
s64)
    # session 64's first call, by the card: on an H200, CALL=s57search (qkv 8B at 128 / 192 rows, the H200 grid's one
    # miss a search may reach; winners proven and timed before / after); then, on any card, the CUDA weight-sync tests
    # (session 63's stacked finiteness check has not run on a GPU: NaN and +-inf in three dtypes, overflowing norms;
    # parity after three pushes) (carry .vllm-cuda; ~500 s on an H200, ~100 s on another card)
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        NO_TAR=1 CALL=s57search bash "$0"
    fi
    part push_tests 150 PART=tests TESTS=tests/gpu/test_vllm_cuda.py K="weight_sync" TEST_TIMEOUT=140
    test_summary push_tests 8
    if ((SECONDS < 400)); then  # not after an H200's search: CALL=s64b alone
        NO_TAR=1 CALL=s64b bash "$0"
    fi
    ;;
s64b)
    # session 64: score_mask (the head over the scored rows only): the graphed pass's GPU tests (every case bitwise
    # against the eager pass and the padded batch's backward), then its cost at a small shape with long prompts,
    # forward-only and training (carry .vllm-cuda; ~320 s)
    part graphs 200 PART=tests TEST_TIMEOUT=195 XDIST=3 TESTS=tests/gpu/test_logprob_graphs_cuda.py
    test_summary graphs 30
    for mode in "--train" ""; do  # the forward-only pass where time is left
        if [ -n "$mode" ] || ((SECONDS < 440)); then
            bench "scored${mode:+_train}" 110 benchmarks/logprob_graphs.py --shape small --seqs 8 --prompt 512 \
                --response 128,512 --steps 12 --scored $mode
            grep -hE "graphs|eager" "$ROOT_OUT/scored${mode:+_train}.log" | cut -c1-300
        fi
    done
    ;;
s65)
    # session 65's first call: the graphed pass's GPU tests after session 64's review refactor (one head-over-rows
    # helper for the eager score mask and the graphs' selected rows; never run on a GPU), then by the card: on an
    # H200, CALL=s57search (qkv 8B at 128 / 192 rows, never searched there); on another card the scored-rows
    # benchmark, training pass (no carry; ~450 s on an H200)
    part graphs 150 PART=tests TEST_TIMEOUT=145 XDIST=3 TESTS=tests/gpu/test_logprob_graphs_cuda.py
    test_summary graphs 30
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        NO_TAR=1 CALL=s57search bash "$0"
    else
        bench scored_train 110 benchmarks/logprob_graphs.py --shape small --seqs 8 --prompt 512 \
            --response 128,512 --steps 12 --scored --train
        grep -hE "graphs|eager" "$ROOT_OUT/scored_train.log" | cut -c1-300
    fi
    ;;
s65c)
    # session 65's last call (~330 s of budget): the graphed pass's GPU tests (the padded pass's waits counted too),
    # then on an H200 CALL=s57search, whose proof a short call's limit may cut (its winners come back in
    # launches.json for CALL=s44prove) (no carry)
    part graphs 110 PART=tests TEST_TIMEOUT=100 XDIST=3 TESTS=tests/gpu/test_logprob_graphs_cuda.py
    test_summary graphs 30
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        NO_TAR=1 CALL=s57search bash "$0"
    fi
    ;;
s66)
    # session 66's first call, by the card: on an H200, CALL=s57search (qkv 8B at 128 / 192 rows, never searched on an
    # H200; winners proven and timed before / after); on another card, CALL=engine (stock, then rlk with the H100
    # launch file's o 8B 641-768-row entry, which has not run inside the engine) (carry .vllm-cuda; ~400-600 s)
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        NO_TAR=1 CALL=s57search bash "$0"
    else
        NO_TAR=1 CALL=engine bash "$0"
    fi
    ;;
s67cold)
    # the warm start (session 66): the 8B engine's start where Triton's cache is empty (recording its kernel file), then
    # with that file compiled ahead on threads, then warm (benchmarks/cold_start.py; carry .vllm-cuda; ~450 s; cut
    # short, CALL=s67cold2 on the same machine replays the file). Then package $ROOT_OUT/cold/kernels_8b.jsonl as
    # rlk_models/ops/triton/kernels/<GPU>.jsonl
    part cold 590 PART=cold SHAPE=8b
    tail -8 "$ROOT_OUT/cold.log"
    ;;
s67o)
    # the H100 launch file's o 8B 641-768-row entry (one launch of 128 x 96 tiles; session 63) on this card: proven at
    # the table edges and timed as a layer (product + residual add + RMSNorm) before / after at 641, 704 and 768 rows
    # (no carry; three parts of up to 120 s). On an H200 a win by > 4% is a candidate for TUNED
    PROVE_LAYER=1 PROVE_ROWS=641,704,768 prove_launches scripts/launch_candidates/s63_o_641_768.json s67o_ 120
    ;;
s67cold2)
    part cold2 400 PART=cold SHAPE=8b COLD_ARGS="--runs preload,warm"
    tail -8 "$ROOT_OUT/cold2.log"
    ;;
s62)
    # session 62's second call: the graphed training pass's GPU tests (their two mended references), then CALL=s62trl
    # (carry .vllm-cuda and .wheels; ~560 s)
    part graphs 110 PART=tests TEST_TIMEOUT=100 XDIST=3 TESTS=tests/gpu/test_logprob_graphs_cuda.py
    test_summary graphs 30
    part trl 440 PART=trl TRL_KINDS="rlk rlk-graphs" TRL_STEPS="${TRL_STEPS:-15}" TRL_LIMIT=210 \
        TRL_ARGS="--sft-steps 100"
    grep -h RESULT "$ROOT_OUT"/trl/trl_*.log | cut -c1-400
    ;;
s62stock)
    # stock TRL (trl.GRPOTrainer on the transformers checkpoint) against RLKGRPOTrainer(cuda_graphs=True) on one
    # machine, TRL_STEPS each (default 12) (carry .vllm-cuda and .wheels; ~350 s: the rlk run compiles its kernels cold)
    part trl 420 PART=trl TRL_KINDS="stock rlk-graphs" TRL_STEPS="${TRL_STEPS:-12}" TRL_LIMIT=260 \
        TRL_ARGS="--sft-steps 100"
    grep -h RESULT "$ROOT_OUT"/trl/trl_*.log | cut -c1-400
    ;;
s62trl)
    # TRL's GRPOTrainer (colocated vLLM, 0.6B shape): RLKGRPOTrainer eager against cuda_graphs=True, TRL_STEPS each
    # (default 20): each run's mismatch (0 owed) and median step seconds (carry .vllm-cuda and .wheels with trl,
    # datasets, multiprocess, dill; ~400 s)
    part trl 450 PART=trl TRL_KINDS="rlk rlk-graphs" TRL_STEPS="${TRL_STEPS:-20}" TRL_LIMIT=210 \
        TRL_ARGS="--sft-steps 100"
    grep -h RESULT "$ROOT_OUT"/trl/trl_*.log | cut -c1-400
    ;;
s61grpo)
    # the main job's trainer with its log-prob passes graphed (rlk-grpo --cuda-graphs) against eager, on one SFT
    # checkpoint (40 steps: the task's accuracy does not matter here): each run's mismatch (0 owed) and its
    # trainer's seconds a step (time_train; the first step, which captures, apart) (carry .vllm-cuda; ~330 s)
    part grpo_eager 190 PART=grpo GRPO_RUNS=rlk GRPO_OUT=/tmp/g-eager GRPO_LIMIT=180 \
        GRPO_ARGS="--steps ${GRPO_STEPS:-15} --sft-steps 40 --eval-every 1000"
    part grpo_graphs 150 PART=grpo GRPO_RUNS=rlk GRPO_OUT=/tmp/g-graphs GRPO_LIMIT=140 \
        GRPO_ARGS="--steps ${GRPO_STEPS:-15} --eval-every 1000 --cuda-graphs --checkpoint /tmp/g-eager/checkpoints/qwen3-0.6b-sft-rlk"
    for side in eager graphs; do
        python3 - "$ROOT_OUT/grpo_$side/grpo/rlk/metrics.jsonl" "$side" <<'PY'
import json, statistics, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "time_train" in r]
t = [r["time_train"] for r in rows]
print(sys.argv[2], "steps", len(rows), "mismatch", sum(r["mismatch_count"] for r in rows), "first step s",
      round(t[0], 4), "median after s", round(statistics.median(t[1:]), 4) if len(t) > 1 else None)
PY
    done
    ;;
s58ab)
    # session 58's host-time change against .probe_old (main at 0d2b254) by alternate processes, as session 58's
    # calls found one process's host times 1.5x another's: qkv 8B at 16 rows (the swap kernel), o 8B at 16 (split
    # and fold) and 1024 (Gluon), the RMSNorm, and a qkv forward + backward (carry .probe_old)
    for round in $(seq "${ROUNDS:-3}"); do
        for side in new old; do
            pp=$([ $side = old ] && echo "$PWD/.probe_old" || echo "$PWD")
            mkdir -p "$ROOT_OUT/ab_${side}_$round"
            OUT="$ROOT_OUT/ab_${side}_$round" PYTHONPATH="$pp" timeout 60 python3 benchmarks/triton/host_time.py \
                --calls 300 --ops "qkv M=16,o M=,rms_norm M=16,qkv fwd" > "$ROOT_OUT/ab_${side}_$round.log" 2>&1
            echo "== $side round $round exit $?"; grep "host per call" "$ROOT_OUT/ab_${side}_$round.log" | cut -c1-100
        done
    done
    ;;
s57layer)
    # o 8B at 768 rows as the engine runs it took 59.9 us against 46.9 us as a product (session 57; cuBLAS 44.4 / 39.1:
    # its norm 5 us), the same gap as session 54's once: the row-parallel 8B layers at 384-1024 rows, 3 rounds each,
    # with each layer side's kernels and their eager times (--kernels), to see which kernel holds the gap (no carry,
    # ~120 s)
    bench layer57 200 benchmarks/triton/matmul_sweep.py --quick --layer --kernels --m 384,512,768,1024 \
        --shapes o,down --graph-rounds 3
    grep -hE "graph:|layer" "$ROOT_OUT"/layer57.log | cut -c1-400
    ;;
s56q)
    # session 56's last device seconds: qkv 8B at 128 and 192 rows (H200 1.20 / 1.35x, H100 1.34 / 1.25x cuBLAS at
    # 129 / 192) against the 64 x 96 Gluon tiles in one K-group (128 tiles at 128 rows, one wave; never searched
    # there) and 64 x 128, 64- and 128-wide K loads, retimed, winners by > 4% into the launch file (no carry)
    search_into_file s56q 100 --m 128,192 --shapes qkv --tiles 64x96,64x128 --block-k 64,128
    search_summary "$ROOT_OUT"/s56q.log
    ;;
s56solo)
    # session 56's solo tiles (matmul_sm90.SOLO_TILES: a tile whose second consumer has no rows inside M is the first
    # consumer's alone, its dots issued without turns; built on the CPU): every layer's rows at its table edges (257,
    # 320, 385...: the defaults' 128 x 128 tiles with a solo last row), then the solo tiles against the form before
    # them on the same operands, 2 copies x 3 rounds (matmul_solo.py), in the ~120 s left of the session's device time
    # (no carry). Ran at 6cf84b9 (bitwise, the edges 8 of 8; slower by 7-14%), reverted after it: the solo tiles and
    # matmul_solo.py are in that commit only
    table_edges 55 XDIST=8
    bench solo56 45 benchmarks/triton/matmul_solo.py --shapes o,down --m 257,320 --copies 2
    grep -hE "M=|Error|error" "$ROOT_OUT"/solo56.log | cut -c1-230
    ;;
s55s)
    # session 55's fifth call: the 1.7B row-parallel layers just past 256 rows (CALL=s54b, H100: o 1.7B 1.38x, down
    # 1.7B 1.50x cuBLAS at 257 rows, on the 64 x 128 Gluon tiles of 129-256), searched against the default, retimed,
    # winners by > 4% into the launch file (no carry)
    search_into_file s55s 320 --m 257 --shapes o_1.7b,down_1.7b --block-k 64,128
    search_summary "$ROOT_OUT"/s55s.log
    ;;
s55k)
    # session 55's sixth call: which kernels cuBLAS runs just past 256 and 640 rows, where every form of ours is
    # 1.37-1.54x on the H100 (CALL=s54b, s55s), against ours (--kernels), then ``explain --all`` (no carry)
    bench kern55 150 benchmarks/triton/matmul_sweep.py --quick --kernels --m 257,641 --shapes o_1.7b,down_1.7b,down
    grep -hE "graph:|kernels:" "$ROOT_OUT"/kern55.log | cut -c1-240
    PYTHONPATH="$PWD" python3 benchmarks/triton/matmul_sweep.py explain "$ROOT_OUT/kern55/matmul_sweep.json" --all |
        cut -c1-400
    ;;
s55r)
    # session 55's last call: --graph-rounds on a GPU for the first time (down 8B at 257 rows timed 70-87 us in
    # three calls on one launch), then the H100's o 8B at 32 rows (1.55x) searched at 64-256-wide loads (no carry)
    bench rounds55 80 benchmarks/triton/matmul_sweep.py --quick --m 257,384 --shapes down --graph-rounds 5
    grep -hE "graph:" "$ROOT_OUT"/rounds55.log | cut -c1-240
    search_into_file s55o 120 --m 32 --shapes o --block-k 64,128,256
    search_summary "$ROOT_OUT"/s55o.log
    ;;
s54)
    # by the card the call lands on (naming nvidia-h200 has given H100s since session 50): on an H200, CALL=s47 (the
    # first H200 table on session 51's TUNED, with cuBLAS's kernels) then CALL=s52ab where the call's time allows; on
    # any other card, CALL=s47layer (the row-parallel layers as the engine runs them, never run) (no carry)
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        NO_TAR=1 CALL=s47 bash "$0"
        if ((SECONDS < 380)); then NO_TAR=1 CALL=s52ab bash "$0"; fi
    else
        NO_TAR=1 CALL=s47layer bash "$0"
    fi
    ;;
s52ab)
    # for an H200 (session 51's timings ran on an H100): the 192 x 96 TUNED rows (qkv 8B 321-384, gate_up 1.7B 129-192)
    # against the 192 x 128 tiles they replaced, given back as a launch file (docs/data/..._s51-before-192x128.json) --
    # here "before" is the current TUNED (192 x 96) and "after" the old tiles -- timed in one call, the edges under the
    # file between (no carry)
    prove_launches "$PWD/docs/data/matmul_launches_2026-12-05-s51-before-192x128.json" s52_ 120
    ;;
s51tuned)
    # session 51's third call: s51's two winners (192 x 96 tiles at qkv 8B 321-384 rows, gate_up 1.7B 129-192) as TUNED
    # defaults, every layer's rows at its table edges, then those layers timed at the rows against cuBLAS (no carry)
    table_edges 120 XDIST=8
    bench tuned51 120 benchmarks/triton/matmul_sweep.py --quick --m 129,192,321,384 --shapes qkv,gate_up_1.7b
    grep -hE "graph:" "$ROOT_OUT"/tuned51.log | cut -c1-120
    ;;
s50table)
    # session 50's sixth call (run inline, recorded here): the whole table on the defaults with a launch file
    # (carry .tuned: s50wide's winners, TUNED since 90ae940, so on a later commit no carry is needed), #17's count
    [ -f "$PWD/.tuned/launches.json" ] && export RLK_MATMUL_LAUNCHES="$PWD/.tuned/launches.json"
    matmul_table 360 | tail -1
    PYTHONPATH="$PWD" python3 benchmarks/triton/matmul_sweep.py goal "$ROOT_OUT/table/matmul_sweep.json" | tail -3
    ;;
s50qkv)
    # session 50's seventh call (inline, recorded here): qkv 8B at 128 and 192 rows (1.20 / 1.35x in s50table) against
    # every candidate at 64- and 128-wide loads, retimed, winners by > 4% into the launch file (no carry)
    search_into_file s50q 250 --m 128,192 --shapes qkv --block-k 64,128
    search_summary "$ROOT_OUT"/s50q.log
    ;;
s49h100)
    # the H100's own misses of the H200-tuned table (session 48, H100): o 8B at 32 rows (1.53x), o 1.7B at 1-4 rows
    # (1.15-1.16x), qkv 8B at 192-768 rows (1.16-1.29x), searched into one launch file, winners by > 4%: the H100's
    # launch file (no carry)
    search_into_file h100_o 250 --m 1,4,32 --shapes o,o_1.7b --block-k 64,128,256
    search_into_file h100_qkv 300 --m 192,384,512,768 --shapes qkv --block-k 64,128
    search_summary "$ROOT_OUT"/h100_*.log
    ;;
s48plain)
    # the plain 8B layers' graph rows on the current defaults (qkv 8B last ran whole in session 34), #17's count
    bench plain48 250 benchmarks/triton/matmul_sweep.py --quick \
        --m 1,2,4,8,16,32,64,128,192,256,384,512,768,1024,2048,4096,8192 --shapes qkv,gate_up
    grep -hE "graph:" "$ROOT_OUT"/plain48.log | cut -c1-120
    PYTHONPATH="$PWD" python3 benchmarks/triton/matmul_sweep.py goal "$ROOT_OUT/plain48/matmul_sweep.json" | tail -2
    ;;
s48qkv)
    # qkv 8B's misses on the H100 (s48plain: 1.25x at 192, 1.29x at 768 rows) searched at 64- and 128-wide loads,
    # winners by > 4% into $ROOT_OUT/launches.json: H100 candidates, for an H200 CALL=s44prove (no carry)
    search_into_file s48q 240 --m 192,768 --shapes qkv --block-k 64,128
    search_summary "$ROOT_OUT"/s48q.log
    ;;
s48engine)
    # the 1.7B engine against stock vLLM on the current Triton ops (session 47's fold_parts changed the norm's fold
    # of split-K partials since the last CUDA vLLM run): throughput, and the rollout's log-probs against the
    # training class's (carry .vllm-cuda)
    part engine_1.7b 430 PART=vllm SHAPE=1.7b ENGINES=stock,rlk VLLM_ARGS="--limit 200"
    tail -40 "$ROOT_OUT/engine_1.7b.log"
    ;;
varied)
    # an RL-shaped rollout: 384 requests of 256-token prompts through 256 slots, outputs of 48-384 tokens, so
    # finished requests make room for new prefills and steps mix prefill and decode (above 512 tokens vLLM's
    # default capture sizes run them eagerly); VARIED_SHAPE, VARIED_ENGINES, VARIED_N (requests; at 1.7B 384 take ~5 s
    # a run and the runs spread 16-22%, session 34: more requests average the host's noise over a longer run),
    # VARIED_LIMIT (seconds an engine), VARIED_ARGS (more vllm_cuda.py arguments, e.g. --engine-profile)
    part "varied_${VARIED_SHAPE:-1.7b}" 560 PART=vllm SHAPE="${VARIED_SHAPE:-1.7b}" \
        ENGINES="${VARIED_ENGINES:-rlk,rlk_graphs512,stock}" \
        VLLM_ARGS="--varied --n ${VARIED_N:-384} --max-tokens 384 --max-num-seqs 256 --prompt-len 256 \
--limit ${VARIED_LIMIT:-200} ${VARIED_ARGS:-}"
    tail -60 "$ROOT_OUT/varied_${VARIED_SHAPE:-1.7b}.log"
    ;;
*) echo "unknown CALL ${CALL}"; exit 2 ;;
esac
[ "${NO_TAR:-0}" = 1 ] && exit 0  # a call run inside another: the outer one packs
rm -rf "$ROOT_OUT"/*/cache
tar czf /tmp/calls.tgz -C "$ROOT_OUT" . && rm -rf "${ROOT_OUT:?}"/* && mv /tmp/calls.tgz "$ROOT_OUT/"
