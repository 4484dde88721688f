"""The ``reference`` backend: readable torch that *is* the numerical contract.

Correct on CPU and CUDA, deterministic and batch-invariant by construction (see
``primitives``). One file per op, each with its forward, backward and autograd function.
"""

from ..autograd import DenseKernels, dense_ops, sum_op
from ..canonical import LINEAR_K_GROUPS, VOCAB_GROUPS, VOCAB_TILE
from ..paged import write_kv
from . import linear as _linear
from .attention import attend, paged_attention, varlen_attention
from .embedding import embedding
from .linear import combine_partials, partials_per_rank, shard_partial
from .logprob_head import combine_shards, full_logprobs, logprob_head, shard_stats
from .primitives import tree_sum
from .rms_norm import add_rms_norm, qk_norm_rope, rms_norm, rms_norm_rope
from .rope import rope
from .silu_mul import silu_mul_backward, silu_mul_forward

NAME = "reference"
# everything that decides this backend's bits; bump contract_version when a formula changes
FINGERPRINT = {"backend": NAME, "contract_version": 2, "linear_k_groups": LINEAR_K_GROUPS, "vocab_tile": VOCAB_TILE,
               "vocab_groups": VOCAB_GROUPS, "transcendentals": "cephes-fp32", "rope_table": "float64-block64"}

token_sum = sum_op(tree_sum)
linear, silu_mul, silu_mul_linear = dense_ops(DenseKernels(
    _linear.linear_forward, _linear.grad_output, _linear.grad_input, _linear.grad_weight, _linear.grad_bias,
    silu_mul_forward, silu_mul_backward))


def is_available() -> tuple[bool, str]:
    return True, ""


__all__ = ["add_rms_norm", "attend", "combine_partials", "combine_shards", "embedding", "full_logprobs", "linear",
           "logprob_head", "paged_attention", "partials_per_rank", "qk_norm_rope", "rms_norm", "rms_norm_rope", "rope",
           "shard_partial", "shard_stats", "silu_mul", "silu_mul_linear", "token_sum", "varlen_attention", "write_kv"]
