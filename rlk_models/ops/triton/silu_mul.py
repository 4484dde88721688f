"""SiLU-gated product ``silu(g) * u`` of the fused ``[..., 2I]`` gate|up tensor, in Triton.

Contract
    Elementwise: fp32 ``s = 1 / (1 + exp(-g))`` (``tl.exp``), ``(g * s) * u``, one rounding to the
    input dtype. Every element runs the same instruction sequence wherever it sits, so there is
    no vector-body/scalar-tail split; bits differ from the reference backend's Cephes exp by an
    ulp-level amount (tolerance-level).

Backward: ``dg = dy * u * s * (1 + g * (1 - s))``, ``du = dy * g * s`` (fp32, elementwise); the same
pass can write the forward's product again (``silu_mul_backward(..., with_act=True)``: the down
projection's weight gradient reads it, ``autograd.dense_ops``'s ``silu_mul_linear``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import cdiv

BLOCK = 1024


@triton.jit
def _silu_mul_fwd(gu_ptr, y_ptr, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    g = tl.load(gu_ptr + row * 2 * inter + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * 2 * inter + inter + cols, mask=mask, other=0.0).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-g))
    tl.store(y_ptr + row * inter + cols, (g * s * u).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_mul_bwd(gu_ptr, dy_ptr, dgu_ptr, act_ptr, inter, WITH_ACT: tl.constexpr, BLOCK: tl.constexpr):
    """WITH_ACT: also store the forward's product (``_silu_mul_fwd``'s expression, so its bits) from the
    g, u and s this pass has anyway -- the down projection's weight gradient reads it."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    g = tl.load(gu_ptr + row * 2 * inter + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * 2 * inter + inter + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * inter + cols, mask=mask, other=0.0).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-g))
    tl.store(dgu_ptr + row * 2 * inter + cols, (dy * u * (s * (1.0 + g * (1.0 - s)))).to(dgu_ptr.dtype.element_ty),
             mask=mask)
    tl.store(dgu_ptr + row * 2 * inter + inter + cols, (dy * (g * s)).to(dgu_ptr.dtype.element_ty), mask=mask)
    if WITH_ACT:
        tl.store(act_ptr + row * inter + cols, (g * s * u).to(act_ptr.dtype.element_ty), mask=mask)


def silu_mul_forward(gu: torch.Tensor) -> torch.Tensor:
    """[M, 2I] contiguous -> [M, I]."""
    inter = gu.shape[1] // 2
    y = torch.empty(gu.shape[0], inter, dtype=gu.dtype, device=gu.device)
    if gu.shape[0]:
        _silu_mul_fwd[(gu.shape[0], cdiv(inter, BLOCK))](gu, y, inter, BLOCK=BLOCK)
    return y


def silu_mul_backward(gu: torch.Tensor, dy: torch.Tensor, with_act: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(dgu [M, 2I], the product [M, I] when ``with_act``) from gu [M, 2I] and dy [M, I], both contiguous."""
    inter = gu.shape[1] // 2
    dgu = torch.empty_like(gu)
    act = torch.empty(gu.shape[0], inter, dtype=gu.dtype, device=gu.device) if with_act else None
    if gu.shape[0]:
        _silu_mul_bwd[(gu.shape[0], cdiv(inter, BLOCK))](gu, dy, dgu, dgu if act is None else act, inter,
                                                        WITH_ACT=with_act, BLOCK=BLOCK)
    return dgu, act
