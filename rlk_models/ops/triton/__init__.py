"""The ``triton`` backend (GPU): the contract's ops as Triton kernels, forward and backward.

One file per op (kernels, launchers, autograd function); each module's docstring states its
contract. The backend is self-consistent -- training (``varlen_attention``) and vLLM's paged
cache (``paged_attention``) give the same bits per token, every op is row-invariant, and
tensor-parallel shards (canonical K-groups, vocab groups) reproduce TP=1 -- and agrees with the
``reference`` backend within stated tolerances only (its own reduction trees and
transcendentals). Runs on CUDA; the kernels' logic also runs on CPU under ``TRITON_INTERPRET=1``
(tests only: fp32/fp16, slow).

A rule for every kernel here: no constexpr may follow a step's size (token or request count, tile
count) beyond a small bounded set (a power of two, a launch bucket). Each distinct constexpr set
is a JIT compile on the GPU, and an engine meets nearly every step size: a loop stride equal to
the grid compiled a matmul per size (session 12). Sizes are runtime arguments;
``test_matmul_constexprs_follow_the_launch_not_m`` guards the matmul.
"""

from __future__ import annotations

import os

import torch

from ..autograd import DenseKernels, dense_ops
from ..canonical import LINEAR_K_GROUPS, VOCAB_GROUPS, VOCAB_TILE
from . import matmul as _mm
from .attention import BLOCK_N as ATTN_BLOCK_N
from .attention import paged_attention, varlen_attention
from .embedding import embedding
from .kv_cache import write_kv
from .logprob_head import combine_shards, full_logprobs, logprob_head, shard_stats
from .matmul import combine_partials, linear_unfolded, partials_per_rank, shard_partial
from .precompile import record_from_env
from .reduce import token_sum
from .rms_norm import add_rms_norm, qk_norm_rope, rms_norm, rms_norm_rope
from .rope import rope
from .silu_mul import silu_mul_backward, silu_mul_forward
from .utils import BLOCK_K

NAME = "triton"
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"  # where its tensors live
# contract version 3: row-parallel K-groups fold in two halves (matmul.py), so TP=2 all-reduces; version 4: the
# RMSNorm forward normalises several rows a program below D = 1024 (rms_norm.py: another sum tree for head norms);
# version 5: the head's trees merge with one written FMA form (logprob_head._pair; ~1% of the 8B head's log-probs
# moved by it), so a package at version 4 and one at 5 would disagree on a checkpoint both accept
FINGERPRINT = {"backend": NAME, "contract_version": 5, "block_k": BLOCK_K, "linear_k_groups": LINEAR_K_GROUPS,
               "vocab_tile": VOCAB_TILE, "vocab_groups": VOCAB_GROUPS, "attention_block_n": ATTN_BLOCK_N,
               "transcendentals": "triton-libdevice", "rope_table": "float64-block64"}


linear, silu_mul, silu_mul_linear = dense_ops(DenseKernels(
    _mm.matmul, _mm.grad_output, _mm.grad_input, _mm.grad_weight, _mm.grad_bias, silu_mul_forward,
    silu_mul_backward))

record_from_env()  # RLK_TRITON_RECORD: this process's kernel compiles, for a packaged kernel file (precompile.py)


def is_available() -> tuple[bool, str]:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True, ""
    if not torch.cuda.is_available():
        return False, "needs a CUDA GPU (or TRITON_INTERPRET=1 for CPU tests)"
    return True, ""


__all__ = ["add_rms_norm", "combine_partials", "combine_shards", "embedding", "full_logprobs", "linear",
           "linear_unfolded", "logprob_head", "paged_attention", "partials_per_rank", "qk_norm_rope", "rms_norm",
           "rms_norm_rope", "rope", "shard_partial", "shard_stats", "silu_mul", "silu_mul_linear", "token_sum",
           "varlen_attention", "write_kv"]
