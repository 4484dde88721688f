"""Embedding: ``out[t] = weight[ids[t]]``.

Contract
    Forward is a gather: exact, no arithmetic. Backward sums the gradients of the tokens that
    share an id in a fixed order: token order (a stable sort groups them), sequentially, in fp32,
    rounded once to the weight's dtype. One loop step per repeat of the most frequent id, never
    per token, and no atomics.
"""

from __future__ import annotations

import torch

from ..autograd import embedding_op
from ..canonical import embedding_order


def embedding_backward(ids: torch.Tensor, grad: torch.Tensor, num_embeddings: int,
                       dtype: torch.dtype) -> torch.Tensor:
    ids = ids.reshape(-1)
    grad = grad.reshape(ids.numel(), -1).to(torch.float32)
    out = torch.zeros(num_embeddings, grad.shape[1], dtype=torch.float32, device=grad.device)
    if ids.numel() == 0:
        return out.to(dtype)
    order, uniq, counts, starts = embedding_order(ids)
    acc = torch.zeros(uniq.numel(), grad.shape[1], dtype=torch.float32, device=grad.device)
    for r in range(int(counts.max())):
        active = counts > r
        acc[active] = acc[active] + grad[order[starts[active] + r]]
    out[uniq] = acc
    return out.to(dtype)


embedding = embedding_op(embedding_backward)
