"""SiLU-gated product ``silu(g) * u`` of the fused ``[..., 2I]`` gate|up tensor, in Triton.

Contract
    Elementwise: fp32 ``s = 1 / (1 + exp(-g))`` (``tl.exp``), ``(g * s) * u``, one rounding to the
    input dtype. Every element runs the same instruction sequence wherever it sits, so there is
    no vector-body/scalar-tail split; bits differ from the reference backend's Cephes exp by an
    ulp-level amount (tolerance-level).

Backward: ``dg = dy * u * s * (1 + g * (1 - s))``, ``du = dy * g * s`` (fp32, elementwise).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_silu_mul

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
def _silu_mul_bwd(gu_ptr, dy_ptr, dgu_ptr, inter, BLOCK: tl.constexpr):
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


class _SiluMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate_up):
        inter = gate_up.shape[-1] // 2
        gu = gate_up.reshape(-1, 2 * inter).contiguous()
        y = torch.empty(gu.shape[0], inter, dtype=gate_up.dtype, device=gate_up.device)
        if gu.shape[0]:
            _silu_mul_fwd[(gu.shape[0], triton.cdiv(inter, BLOCK))](gu, y, inter, BLOCK=BLOCK)
        ctx.save_for_backward(gu)
        ctx.shape = gate_up.shape
        return y.view(*gate_up.shape[:-1], inter)

    @staticmethod
    def backward(ctx, dy):
        (gu,) = ctx.saved_tensors
        inter = gu.shape[1] // 2
        dgu = torch.empty_like(gu)
        if gu.shape[0]:
            _silu_mul_bwd[(gu.shape[0], triton.cdiv(inter, BLOCK))](gu, dy.reshape(-1, inter).contiguous(), dgu, inter,
                                                                   BLOCK=BLOCK)
        return dgu.view(ctx.shape)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    check_silu_mul(gate_up)
    return _SiluMul.apply(gate_up)
