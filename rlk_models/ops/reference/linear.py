"""Linear: ``y = x @ w.T (+ b)``, batch-invariant by construction.

Contract
    Reduces over K (in_features) with ``tree_sum``: fp32 products (exact for bf16 operands)
    and a halving tree. The K order is a property of the layer: a **row-parallel** layer
    (``row_parallel=True``: o_proj, down_proj, whose K tensor parallelism splits) reduces with
    ``groups=LINEAR_K_GROUPS`` -- a halving tree inside each of the 8 canonical K-groups, an
    adjacent pairwise tree across the groups; every other layer (column-parallel: K is never
    split) with one group. The bias is added in fp32 after the reduction; the result rounds
    once, to ``out_dtype`` (default: x's dtype). A row's bits therefore depend only on that row,
    the weights and the layer's kind: not on M, the row's position, threads or device. The 8
    groups are the canonical K segments that tensor parallelism splits along: a row-parallel
    rank of k (k | 8, K % 8 == 0) owns 8/k whole groups, reduces them to an fp32 partial
    (``shard_partial``: a subtree of the canonical tree), and the k partials, gathered in rank
    order, finish the tree (``combine_partials``) -- TP=k gives TP=1's bits.

Backward (deterministic, fp32 accumulation, rounded to each input's dtype)
    dx = dy @ w   (reduction over N with the same tree),
    dw = dy.T @ x (reduction over the rows, same tree), db = tree_sum over the rows.
"""

from __future__ import annotations

import torch

from ..canonical import LINEAR_K_GROUPS
from .primitives import matmul_nt, pairwise_combine, tree_sum


def linear_fwd(x2: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, groups: int = 1) -> torch.Tensor:
    """fp32 [M, N] = x2 [M, K] @ w [N, K].T (+ b), K reduced in ``groups`` canonical groups,
    before the final rounding."""
    y = matmul_nt(x2, w, groups)
    if b is not None:
        y = y + b.to(torch.float32)
    return y


def partials_per_rank(tp_size: int) -> int:
    """P of ``shard_partial``'s [P, ..., N]: one subtree per rank."""
    return 1


def shard_partial(x: torch.Tensor, w_shard: torch.Tensor, tp_size: int) -> torch.Tensor:
    """fp32 partial [1, ..., N] of a row-parallel rank: its K-slice of x [..., K/k] against w_shard
    [N, K/k], reduced as the canonical tree's subtree."""
    if LINEAR_K_GROUPS % tp_size:
        raise ValueError(f"tensor-parallel size {tp_size} must divide {LINEAR_K_GROUPS}")
    if (x.shape[-1] * tp_size) % LINEAR_K_GROUPS:
        raise ValueError(f"row-parallel K={x.shape[-1] * tp_size} must be a multiple of {LINEAR_K_GROUPS}")
    y = matmul_nt(x.reshape(-1, x.shape[-1]), w_shard, LINEAR_K_GROUPS // tp_size)
    return y.reshape(1, *x.shape[:-1], w_shard.shape[0])


def combine_partials(parts: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """Finish the canonical tree over ranks' partials stacked in rank order [k, 1, ..., N]; add
    the bias in fp32 and round once."""
    y = pairwise_combine(parts.reshape(-1, *parts.shape[2:]).movedim(0, -1))
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(out_dtype)


def linear_forward(x2: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, out_dtype: torch.dtype,
                   row_parallel: bool) -> torch.Tensor:
    return linear_fwd(x2, w, b, LINEAR_K_GROUPS if row_parallel else 1).to(out_dtype)


def grad_output(dy2: torch.Tensor, x_dtype: torch.dtype) -> torch.Tensor:
    return dy2.to(torch.float32)


def grad_input(dy2: torch.Tensor, w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return matmul_nt(dy2, w.t(), LINEAR_K_GROUPS).to(dtype)


def grad_weight(dy2: torch.Tensor, x2: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return matmul_nt(dy2.t(), x2.t(), LINEAR_K_GROUPS).to(dtype)


def grad_bias(dy2: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return tree_sum(dy2.t(), LINEAR_K_GROUPS).to(dtype)
