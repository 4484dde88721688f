"""vLLM at tensor_parallel_size=2 (real worker processes on CPU) returns the TP=1 training
class's log-probs bit for bit, through ``rlk-verify --tensor-parallel-size 2``: row-parallel
layers all-reduce one fp32 partial per rank (the canonical sum at TP=2 is the one addition
p0 + p1), and the head reduces canonical vocab groups per rank."""

from .conftest import run_json

# mixed batches at temperature 1 with prompt log-probs, chunked prefill, prefix-cache hits: the CPU
# share of the sweep (tests/gpu/test_vllm_cuda.py runs every configuration at TP=2 on two GPUs)
CONFIGS = {"qwen3": "batches_16_3_temp1,chunked_prefill_16,prefix_cache_block16,compiled",
           "llama_bias": "batches_16_3_temp1"}  # llama_bias: row-parallel biases, one KV head replicated


def test_rlk_verify_at_tp2_equals_tp1_training(checkpoints):
    for variant, names in CONFIGS.items():
        reports = run_json(["-m", "rlk_models.cli.verify", str(checkpoints[variant][1]), "--tensor-parallel-size",
                            "2", "--configs", names, "--json"])
        assert [r["config"] for r in reports] == names.split(",")
        for r in reports:
            assert r["tokens"] > 100, (variant, r)
            assert r["mismatch_count"] == 0 and r["max_abs_diff"] == 0.0, (variant, r)
            if r["config"].startswith("prefix_cache"):
                assert r["cached_tokens"] > 0, (variant, r)
