"""Embedding in Triton: forward is a gather (exact); backward sums, per id, the gradients of the
tokens holding it in token order, sequentially in fp32, rounded once -- the reference's
order. A stable sort groups the tokens; one program per (distinct id, column block); no atomics.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..autograd import embedding_op
from ..canonical import embedding_order
from .utils import cdiv

BLOCK_D = 256


@triton.jit
def _emb_bwd(grad_ptr, order_ptr, starts_ptr, counts_ptr, uniq_ptr, out_ptr, D, BLOCK_D: tl.constexpr):
    u = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    ok = cols < D
    start = tl.load(starts_ptr + u)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for i in range(tl.load(counts_ptr + u)):  # this id's tokens, in token order
        t = tl.load(order_ptr + start + i).to(tl.int64)
        acc += tl.load(grad_ptr + t * D + cols, mask=ok, other=0.0).to(tl.float32)
    row = tl.load(uniq_ptr + u).to(tl.int64)
    tl.store(out_ptr + row * D + cols, acc.to(out_ptr.dtype.element_ty), mask=ok)


def embedding_backward(ids: torch.Tensor, grad: torch.Tensor, num_embeddings: int, dtype: torch.dtype) -> torch.Tensor:
    ids = ids.reshape(-1)
    d = grad.shape[-1]
    grad = grad.reshape(ids.numel(), d).contiguous()
    out = torch.zeros(num_embeddings, d, dtype=dtype, device=grad.device)
    if ids.numel() == 0:
        return out
    order, uniq, counts, starts = embedding_order(ids)
    _emb_bwd[(uniq.numel(), cdiv(d, BLOCK_D))](grad, order, starts, counts, uniq, out, d, BLOCK_D=BLOCK_D)
    return out


embedding = embedding_op(embedding_backward)
