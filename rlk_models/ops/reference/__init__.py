"""The ``reference`` backend: readable torch that *is* the numerical contract.

Correct on CPU and CUDA, deterministic and batch-invariant by construction (see
``primitives``). One file per op, each with its forward, backward and autograd function.
"""

from .attention import attend, varlen_attention
from .embedding import embedding
from .linear import linear
from .logprob_head import full_logprobs, logprob_head
from .rms_norm import rms_norm
from .rope import rope
from .silu_mul import silu_mul

from .linear import LINEAR_K_GROUPS
from .logprob_head import VOCAB_TILE

NAME = "reference"
# everything that decides this backend's bits; bump contract_version when a formula changes
FINGERPRINT = {"backend": NAME, "contract_version": 1, "linear_k_groups": LINEAR_K_GROUPS,
               "vocab_tile": VOCAB_TILE, "transcendentals": "cephes-fp32", "rope_table": "float64-block64"}


def is_available() -> tuple[bool, str]:
    return True, ""


__all__ = ["attend", "embedding", "full_logprobs", "linear", "logprob_head", "rms_norm", "rope",
           "silu_mul", "varlen_attention"]
