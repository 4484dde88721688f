"""Rotary position embedding (neox / rotate-half layout) applied per token.

Contract
    For x [T, H, D] and a table from ``rlk_models.ops.rope_table`` (cos | sin rows), with
    x1 = x[..., :D/2], x2 = x[..., D/2:], c/s the row at the token's position:
    ``out1 = x1*c - x2*s``, ``out2 = x2*c + x1*s`` in fp32 (each product and the sum a single
    IEEE op), rounded once to x's dtype. Elementwise: nothing depends on other tokens.

Backward: the transposed rotation, ``dx1 = dy1*c + dy2*s``, ``dx2 = dy2*c - dy1*s``.
"""

from __future__ import annotations

import torch

from ..checks import check_rope


def _rotate(x32: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    h = x32.shape[-1] // 2
    x1, x2 = x32[..., :h], x32[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _cos_sin(table: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    cs = table[positions.long()][:, None, :]  # [T, 1, D]
    h = cs.shape[-1] // 2
    return cs[..., :h], cs[..., h:]


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, positions, table):
        cos, sin = _cos_sin(table, positions)
        ctx.save_for_backward(positions, table)
        ctx.dtype = x.dtype
        return _rotate(x.to(torch.float32), cos, sin).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        positions, table = ctx.saved_tensors
        cos, sin = _cos_sin(table, positions)
        return _rotate(dy.to(torch.float32), cos, -sin).to(ctx.dtype), None, None


def rope(x: torch.Tensor, positions: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [T, H, D]`` by the angles of ``positions [T]`` read from ``table [P, D]``."""
    check_rope(x, positions, table)
    return _Rope.apply(x, positions, table)
