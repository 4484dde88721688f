"""The rlk vLLM classes inside a real CUDA vLLM (0.26 on the lent H200), with the Triton backend:
the ``rlk-verify`` sweep (every configuration of ``rollout.parity.configs()``: mixed batches up
to 256, chunked prefill, prefix-cache hits, prompt log-probs, one vs many sequences per step,
CUDA graphs on (the default) and off) gives log-probs bitwise equal to the training class on the
same GPU, weight sync keeps that after each update, and on two GPUs tensor_parallel_size=2 gives the
TP=1 training class's bits.

Marked ``gpu``; skipped without CUDA or without vLLM. ``scripts/device_sweep.sh`` runs them."""

import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
if torch.cuda.is_available():
    pytest.importorskip("vllm")

from rlk_models.conversion import convert  # noqa: E402
from rlk_models.rollout.parity import configs  # noqa: E402
from rlk_models.testing.tiny import make_tiny_hf_checkpoint  # noqa: E402
from tests.vllm.conftest import run_json  # noqa: E402


@pytest.fixture(autouse=True)
def free_cached_gpu_memory():
    """Each engine runs in its own process and asks for vLLM's share of the GPU's *free* memory:
    hand back what earlier tests in this process left in torch's caching allocator."""
    torch.cuda.empty_cache()


@pytest.fixture(scope="module")
def triton_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-ckpt")
    out = {}
    for name, family, overrides in [("qwen3", "qwen3", {}), ("llama_bias", "llama", {
            "attention_bias": True, "mlp_bias": True, "num_key_value_heads": 1})]:
        hf = make_tiny_hf_checkpoint(root / f"{name}-hf", family, seed=1, **overrides)
        out[name] = convert(hf, root / f"{name}-rlk", rlk_backend="triton", progress=False)
    return out


def check_verify(ckpt, config: str, *extra: str) -> None:
    """``rlk-verify --configs CONFIG``: one configuration per test (an engine each, about a
    minute at TP=2), so a hung or slow engine costs one test and the log names every one that
    held."""
    (r,) = run_json(["-m", "rlk_models.cli.verify", str(ckpt), "--configs", config, *extra, "--json"])
    assert r["config"] == config
    assert r["tokens"] > 100, r
    assert r["mismatch_count"] == 0 and r["max_abs_diff"] == 0.0, r
    if config.startswith("prefix_cache"):
        assert r["cached_tokens"] > 0, r


@pytest.mark.parametrize("config", list(configs()))
@pytest.mark.parametrize("variant", ["qwen3", "llama_bias"])
def test_rlk_verify_on_cuda_every_configuration(triton_checkpoints, variant, config):
    check_verify(triton_checkpoints[variant], config)


@pytest.mark.parametrize("config", ["budget_384_decode_192", "budget_768_decode_512"])
@pytest.mark.parametrize("shape", ["1.7b", "8b"])
def test_rlk_verify_on_cuda_at_the_tuned_layer_shapes(tmp_path, shape, config):
    """``rlk-verify``'s mid-size steps on a 2-layer checkpoint of the 8B's or 1.7B's layer shapes (the engine
    benchmark's, with the tiny tokenizer's vocabulary): inside CUDA vLLM, the launches ``TUNED`` names for those
    shapes, which the tiny checkpoints above never reach, give the training class's log-probs.
    ``budget_384_decode_192``: full steps run 384 rows (qkv 8B's 192 x 96 tiles, gate_up 1.7B's 192 x 192), decode
    steps up to 192 (gate_up 8B's 192 x 192, gate_up 1.7B's 192 x 96). ``budget_768_decode_512``: full steps run 768
    rows (qkv 8B's 192 x 192; 192 x 128 at gate_up 8B, qkv 1.7B and gate_up 1.7B), decode steps up to 512 (qkv 8B's
    128 x 192, gate_up 1.7B's 128 x 128). The mixed steps' row counts are vLLM's scheduling."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from vllm_cuda import COMMON, SHAPES

    hf = make_tiny_hf_checkpoint(tmp_path / "hf", "qwen3", seed=1,
                                 **{**SHAPES[shape], "num_hidden_layers": 2, "head_dim": COMMON["head_dim"]})
    check_verify(convert(hf, tmp_path / "rlk", rlk_backend="triton", progress=False), config)


def test_weight_sync_all_finite_on_cuda():
    """push_weights' finiteness check on CUDA tensors (its multi-tensor L1 norms, what a GPU trainer's push runs)
    equals the element-wise check: NaN and +-inf refused in every dtype, finite tensors whose norm overflows kept."""
    from rlk_models.rollout.sync import all_finite
    from tests.vllm.test_fail_closed import finite_cases

    cases = finite_cases("cuda")
    assert all_finite(cases) == [bool(torch.isfinite(t).all()) for t in cases]
    assert all_finite(cases).count(False) == 9


def test_weight_sync_on_cuda(triton_checkpoints):
    (out,) = run_json(["-m", "tests.vllm.worker", "weight_sync", str(triton_checkpoints["qwen3"])])
    stale, *updates = out["results"]
    assert out["in_process"]  # the CUDA trainer's tensors went in GPU to GPU
    assert stale["mismatch_count"] > 0
    for u in updates:
        assert u["tensors"] > 0 and u["tokens"] > 100, u
        assert u["mismatch_count"] == 0 and u["max_abs_diff"] == 0.0, u


@pytest.fixture(scope="module")
def tp_checkpoints(tmp_path_factory):
    """The tiny variants with row-parallel K (heads x head_dim, intermediate) of 512: the Triton
    backend's row-parallel layers split K along its 8 canonical groups of 64, so K/TP must hold
    whole groups (``shard_partial`` refuses smaller K with that message)."""
    root = tmp_path_factory.mktemp("gpu-tp-ckpt")
    sizes = dict(head_dim=128, intermediate_size=512)
    out = {}
    for name, family, overrides in [("qwen3", "qwen3", {}), ("llama_bias", "llama", {
            "attention_bias": True, "mlp_bias": True, "num_key_value_heads": 2})]:
        hf = make_tiny_hf_checkpoint(root / f"{name}-hf", family, seed=1, **sizes, **overrides)
        out[name] = convert(hf, root / f"{name}-rlk", rlk_backend="triton", progress=False)
    return out


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (nvidia-h200-x2)")
@pytest.mark.parametrize("config", list(configs()))
@pytest.mark.parametrize("variant", ["qwen3", "llama_bias"])
def test_rlk_verify_at_tp2_on_two_gpus_every_configuration(tp_checkpoints, variant, config):
    """``rlk-verify --tensor-parallel-size 2``: every configuration of the sweep with vLLM at
    tensor_parallel_size=2 over NCCL (fp32 all-reduce of the row-parallel halves, vocab-group
    head) against the TP=1 training class on one GPU, bit for bit."""
    check_verify(tp_checkpoints[variant], config, "--tensor-parallel-size", "2")

