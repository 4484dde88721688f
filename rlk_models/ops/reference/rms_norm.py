"""RMSNorm over the last dim (hidden states, or per head for Qwen3's q/k norm).

Contract
    ``y = w * round(x * (1 / sqrt(tree_sum(x*x) / D + eps)))``: x in fp32, sum of squares by
    ``tree_sum`` (groups=1) over the last dim, division by D, ``sqrt`` and ``1/`` are single IEEE
    ops. The normalised value rounds to x's dtype, then multiplies the weight in that dtype (one
    rounding) -- the rounding points of HF transformers' and vLLM's RMSNorm. Each row is reduced
    on its own: batch- and position-invariant.

Backward (deterministic; fp32)
    With n = x * r:  dx = r * (g - n * mean(g * n)),  g = dy * w;  dw = tree_sum over rows of dy * n.
"""

from __future__ import annotations

import torch

from ..checks import check_add_rms_norm, check_rms_norm
from .primitives import tree_sum
from .rope import rope


def _inv_rms(x32: torch.Tensor, eps: float) -> torch.Tensor:
    return 1.0 / torch.sqrt(tree_sum(x32 * x32) / x32.shape[-1] + eps)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        x32 = x.to(torch.float32)
        r = _inv_rms(x32, eps)[..., None]
        ctx.save_for_backward(x, w, r)
        return w * (x32 * r).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, w, r = ctx.saved_tensors
        n = x.to(torch.float32) * r
        dy32 = dy.to(torch.float32)
        g = dy32 * w.to(torch.float32)
        dx = r * (g - n * (tree_sum(g * n) / n.shape[-1])[..., None])
        dw = tree_sum((dy32 * n).reshape(-1, n.shape[-1]).t())
        return dx.to(x.dtype), dw.to(w.dtype), None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of ``x [..., D]`` with ``weight [D]`` -> x's shape and dtype."""
    check_rms_norm(x, weight)
    return _RMSNorm.apply(x, weight, eps)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(s), s)`` for ``s = x + residual`` (torch's add: one rounding to x's dtype)."""
    check_add_rms_norm(x, residual, weight)
    s = x + residual
    return _RMSNorm.apply(s, weight, eps), s


def rms_norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, positions: torch.Tensor,
                  table: torch.Tensor) -> torch.Tensor:
    """``rope(rms_norm(x, weight, eps), positions, table)`` of ``x [T, H, D]`` (Qwen3's q/k): the two
    ops, each with its own argument check."""
    return rope(rms_norm(x, weight, eps), positions, table)


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                 positions: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``rms_norm_rope`` of q and of k (Qwen3's q/k norms): the two calls."""
    return rms_norm_rope(q, q_weight, eps, positions, table), rms_norm_rope(k, k_weight, eps, positions, table)
