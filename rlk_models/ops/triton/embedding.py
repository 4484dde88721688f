"""Embedding in Triton: forward is a gather (exact); backward sums, per id, the gradients of the
tokens holding it in token order, sequentially in fp32, rounded once -- the reference's
order. A stable sort groups the tokens; one program per (sorted token, column block), of which
those that start an id's run sum it; no atomics, and no host read (``canonical.embedding_runs``):
the backward runs inside a captured CUDA graph (``modeling.logprob_graphs``' training graphs).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..autograd import embedding_op
from ..canonical import embedding_runs
from .utils import cdiv

BLOCK_D = 256


@triton.jit
def _emb_bwd(grad_ptr, order_ptr, sorted_ptr, runs_ptr, out_ptr, D, BLOCK_D: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    run = tl.load(runs_ptr + i)  # 0 unless sorted position i starts an id's run
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for j in range(run):  # this id's tokens, in token order
        t = tl.load(order_ptr + i + j).to(tl.int64)
        acc += tl.load(grad_ptr + t * D + cols, mask=cols < D, other=0.0).to(tl.float32)
    row = tl.load(sorted_ptr + i).to(tl.int64)
    tl.store(out_ptr + row * D + cols, acc.to(out_ptr.dtype.element_ty), mask=(cols < D) & (run > 0))


def embedding_backward(ids: torch.Tensor, grad: torch.Tensor, num_embeddings: int, dtype: torch.dtype) -> torch.Tensor:
    ids = ids.reshape(-1)
    d = grad.shape[-1]
    grad = grad.reshape(ids.numel(), d).contiguous()
    out = torch.zeros(num_embeddings, d, dtype=dtype, device=grad.device)
    if ids.numel() == 0:
        return out
    order, sorted_ids, runs = embedding_runs(ids)
    _emb_bwd[(ids.numel(), cdiv(d, BLOCK_D))](grad, order, sorted_ids, runs, out, d, BLOCK_D=BLOCK_D)
    return out


embedding = embedding_op(embedding_backward)
