"""vLLM at tensor_parallel_size=2 (real worker processes on CPU) returns the TP=1 training
class's log-probs bit for bit: row-parallel layers combine canonical partials (the reference
backend at TP=2: one fp32 all-reduce, p0 + p1), and the head reduces canonical vocab groups per
rank."""

from .conftest import run_json


def test_vllm_tp2_equals_tp1_training(checkpoints):
    for variant in ("qwen3", "llama_bias"):  # llama_bias: row-parallel biases, one KV head replicated
        (out,) = run_json(["-m", "tests.vllm.worker", "tensor_parallel_2", str(checkpoints[variant][1])])
        assert out["tokens"] > 500, out
        assert out["mismatch_count"] == 0 and out["max_abs_diff"] == 0.0, (variant, out)
