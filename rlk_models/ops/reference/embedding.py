"""Embedding: ``out[t] = weight[ids[t]]``.

Contract
    Forward is a gather: exact, no arithmetic. Backward sums the gradients of the tokens that
    share an id in a fixed order: token order (a stable sort groups them), sequentially, in fp32,
    rounded once to the weight's dtype. One loop step per repeat of the most frequent id, never
    per token, and no atomics.
"""

from __future__ import annotations

import torch

from ..checks import check_embedding


def embedding_backward(ids: torch.Tensor, grad: torch.Tensor, num_embeddings: int,
                       dtype: torch.dtype) -> torch.Tensor:
    ids = ids.reshape(-1)
    grad = grad.reshape(ids.numel(), -1).to(torch.float32)
    out = torch.zeros(num_embeddings, grad.shape[1], dtype=torch.float32, device=grad.device)
    if ids.numel() == 0:
        return out.to(dtype)
    order = torch.sort(ids, stable=True).indices
    uniq, counts = torch.unique_consecutive(ids[order], return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    acc = torch.zeros(uniq.numel(), grad.shape[1], dtype=torch.float32, device=grad.device)
    for r in range(int(counts.max())):
        active = counts > r
        acc[active] = acc[active] + grad[order[starts[active] + r]]
    out[uniq] = acc
    return out.to(dtype)


class _Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight):
        ctx.save_for_backward(ids)
        ctx.num, ctx.dtype = weight.shape[0], weight.dtype
        return weight[ids]

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        return None, embedding_backward(ids, grad, ctx.num, ctx.dtype)


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Rows of ``weight`` [V, D] for integer ``ids`` of any shape -> [*ids.shape, D]."""
    check_embedding(ids, weight)
    return _Embedding.apply(ids, weight)
