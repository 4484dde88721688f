"""Rotary position embedding (neox / rotate-half layout) in Triton, forward and backward.

Contract
    The reference formula on the same fp32 table (``rlk_models.ops.rope_table``): with x1, x2 the
    halves of a head and c, s the table row at the token's position, ``x1*c - x2*s`` and
    ``x2*c + x1*s`` in fp32 (the compiler may fuse a product into an FMA: the same instructions
    for every element, so the same bits at any row), rounded once to x's dtype. Elementwise:
    nothing depends on other tokens. Backward is the transposed rotation (sin negated).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..autograd import run_forward
from ..checks import check_rope
from .utils import next_power_of_2


@triton.jit
def rotated_lo(x1, x2, c, s):
    """The first half of the contract's rotation of a head (fp32 halves x1, x2; table row c, s):
    the one definition ``_rope_kernel`` and the fused ``rms_norm_rope`` (``rms_norm._rms_fwd``) use."""
    return x1 * c - x2 * s


@triton.jit
def rotated_hi(x1, x2, c, s):
    """The second half of the rotation (``rotated_lo``)."""
    return x2 * c + x1 * s


@triton.jit
def _rope_kernel(x_ptr, pos_ptr, tab_ptr, y_ptr, H, HALF, sx, sy, SIGN: tl.constexpr, BLOCK_H: tl.constexpr,
                 BLOCK_HALF: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    hh = tl.arange(0, BLOCK_H)[:, None]
    j = tl.arange(0, BLOCK_HALF)[None, :]
    ok = (hh < H) & (j < HALF)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    c = tl.load(tab_ptr + pos * 2 * HALF + j, mask=j < HALF, other=0.0)
    s = tl.load(tab_ptr + pos * 2 * HALF + HALF + j, mask=j < HALF, other=0.0) * SIGN
    off = hh * 2 * HALF + j
    x1 = tl.load(x_ptr + t * sx + off, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + t * sx + off + HALF, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + t * sy + off, rotated_lo(x1, x2, c, s).to(y_ptr.dtype.element_ty), mask=ok)
    tl.store(y_ptr + t * sy + off + HALF, rotated_hi(x1, x2, c, s).to(y_ptr.dtype.element_ty), mask=ok)


def _apply(x: torch.Tensor, positions: torch.Tensor, table: torch.Tensor, sign: float) -> torch.Tensor:
    t, h, d = x.shape
    x = x if x.stride(2) == 1 and x.stride(1) == d else x.contiguous()
    y = torch.empty(t, h, d, dtype=x.dtype, device=x.device)
    if t:
        _rope_kernel[(t,)](x, positions, table, y, h, d // 2, x.stride(0), y.stride(0), SIGN=sign,
                           BLOCK_H=next_power_of_2(h), BLOCK_HALF=next_power_of_2(d // 2))
    return y


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, positions, table):
        ctx.save_for_backward(positions, table)
        return _apply(x, positions, table, 1.0)

    @staticmethod
    def backward(ctx, dy):
        positions, table = ctx.saved_tensors
        return rope_backward(dy, positions, table), None, None


def rope_backward(dy: torch.Tensor, positions: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The gradient through rope: ``dy`` rotated back (sin negated)."""
    return _apply(dy, positions, table, -1.0)


def rope(x: torch.Tensor, positions: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [T, H, D]`` by the angles of ``positions [T]`` read from ``table [P, D]`` (fp32)."""
    check_rope(x, positions, table)
    return run_forward(_Rope, x, positions.contiguous(), table.to(torch.float32).contiguous())
