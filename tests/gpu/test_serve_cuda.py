"""``rlk-serve`` (vLLM's OpenAI server with the rlk class) on the GPU: a triton checkpoint, full
decode CUDA graphs (rlk-serve's CUDA default), 32 concurrent completion requests of mixed lengths
with sampled and prompt log-probs, every one bitwise equal to the training class on the same GPU.
The CPU version is tests/vllm/test_server.py, whose helpers this reuses.

Marked ``gpu``; skipped without CUDA or without vLLM. ``scripts/device_sweep.sh`` runs it."""

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
if torch.cuda.is_available():
    pytest.importorskip("vllm")

from rlk_models.conversion import convert  # noqa: E402
from rlk_models.testing.tiny import make_tiny_hf_checkpoint  # noqa: E402
from tests.vllm.test_server import concurrent_parity, running_server  # noqa: E402


def test_openai_server_on_cuda_bitwise_equal_training(tmp_path):
    torch.cuda.empty_cache()  # the server asks for a share of the GPU's *free* memory
    hf = make_tiny_hf_checkpoint(tmp_path / "hf", "qwen3", seed=1)
    ckpt = str(convert(hf, tmp_path / "rlk", rlk_backend="triton", progress=False))
    with running_server(ckpt, tmp_path / "server.log", ["--gpu-memory-utilization", "0.5"]) as base:
        for seed in (None, 1000):  # engine-seeded and per-request seeded sampling
            report = concurrent_parity(base, ckpt, seed=seed, device="cuda")
            assert report.tokens > 500
            assert report.mismatch_count == 0 and report.max_abs_diff == 0.0, (seed, report)
