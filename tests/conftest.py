"""Shared fixtures: tiny checkpoints generated locally (transformers' own classes, random
weights, a BPE tokenizer trained on generated text) and their rlk conversions."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Triton kernels run natively on CUDA, else under the interpreter; the variable must be set
# before anything imports the kernels (they are decorated at import).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Property tests must not depend on the machine's speed or on earlier runs: no deadline, no
# too-slow health check, examples derived from the test alone, no example database.
settings.register_profile("rlk", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          derandomize=True, database=None)
settings.load_profile("rlk")

import rlk_models  # noqa: E402,F401  (registers the Auto classes)
from rlk_models.conversion import convert  # noqa: E402
from rlk_models.testing.tiny import make_tiny_hf_checkpoint  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# name -> (family, overrides of the tiny config)
VARIANTS = {
    "qwen3": ("qwen3", {}),
    "qwen3_tied": ("qwen3", {"tie_word_embeddings": True}),
    "llama3": ("llama", {}),  # Llama-3 rope scaling (rlk_models.llama.FAMILY.tiny)
    "llama_bias": ("llama", {"attention_bias": True, "mlp_bias": True, "num_key_value_heads": 1,
                             "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
}


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """name -> (hf_dir, rlk_dir) for every variant, made once per test session."""
    root = tmp_path_factory.mktemp("ckpt")
    out = {}
    for name, (family, overrides) in VARIANTS.items():
        hf = make_tiny_hf_checkpoint(root / f"{name}-hf", family, seed=1, **overrides)
        out[name] = (hf, convert(hf, root / f"{name}-rlk", progress=False))
    return out


@pytest.fixture(autouse=True)
def _restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


# Backends whose bitwise contract can be shown on this machine: the reference everywhere; Triton
# natively on CUDA (under the interpreter its dots follow the host BLAS, so its bitwise checks are
# the exact-input ones in tests/ops/triton/test_kernels.py).
CONTRACT_BACKENDS = ["reference"] + (["triton"] if torch.cuda.is_available() else [])


def backend_device(backend: str) -> str:
    return "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"
