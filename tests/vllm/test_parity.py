"""vLLM's reported log-probs (sampled tokens and prompts) equal the training class's
``token_logprobs`` bit for bit, through the real vLLM engine on CPU, in every engine
configuration of ``rlk_models.cli.verify.CONFIGS``: batches of 1-16 mixed-length prompts, several
generate calls per engine, chunked prefill (16-token budget), one vs many sequences per step,
prefix-cache hits at block size 16 and vLLM's default, greedy and temperature-1 sampling, and the
decoder compiled by vLLM (``rlk_compile``: torch.compile with the ops as ``rlk::*`` custom ops)."""

import pytest

from rlk_models.rollout.parity import CONFIGS

from .conftest import run_json


@pytest.mark.parametrize("variant, configs", [
    ("qwen3", list(CONFIGS)),
    ("llama3", list(CONFIGS)),
    ("qwen3_tied", ["batches_16_3_temp1", "chunked_prefill_16"]),
    ("llama_bias", ["batches_16_3_temp1", "prefix_cache_block16", "compiled"]),
])
def test_vllm_logprobs_equal_training_class(checkpoints, variant, configs):
    reports = run_json(["-m", "rlk_models.cli.verify", str(checkpoints[variant][1]), "--json",
                        "--configs", ",".join(configs)])
    assert [r["config"] for r in reports] == configs
    for r in reports:
        assert r["tokens"] > 100, r
        assert r["mismatch_count"] == 0 and r["max_abs_diff"] == 0.0, r
        if r["config"].startswith("prefix_cache"):
            assert r["cached_tokens"] > 0, r  # the second generate call really hit the cache


def test_weight_sync_gives_parity_after_each_update(checkpoints):
    (out,) = run_json(["-m", "tests.vllm.worker", "weight_sync", str(checkpoints["qwen3"][1])])
    stale, *updates = out["results"]
    assert out["in_process"]  # so push_weights handed the trainer's tensors over as they are
    assert stale["mismatch_count"] > 0  # old weights in the engine: the comparison does detect it
    assert len(updates) == 3
    for u in updates:
        assert u["tensors"] > 0 and u["tokens"] > 100 and u["cached_tokens"] > 0, u
        assert u["mismatch_count"] == 0 and u["max_abs_diff"] == 0.0, u


def test_default_logprobs_mode_fails_closed_with_the_flag(checkpoints):
    (out,) = run_json(["-m", "tests.vllm.worker", "fail_closed", str(checkpoints["qwen3"][1])])
    assert out["error"] is not None and 'logprobs_mode="raw_logits"' in out["error"], out
