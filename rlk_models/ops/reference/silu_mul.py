"""SiLU-gated product: ``silu(gate) * up`` for the fused ``[..., 2I]`` gate|up projection.

Contract
    In fp32: ``s = sigmoid(g)`` with the primitives' ``exp`` (never ``F.silu``, whose vector body
    and scalar tail differ on CPU), then ``(g * s) * u``, rounded once to the input dtype.

Backward: ``dg = dy * u * s * (1 + g * (1 - s))``, ``du = dy * g * s`` (fp32).
"""

from __future__ import annotations

import torch

from ..checks import check_silu_mul
from .primitives import sigmoid


class _SiluMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate_up):
        ctx.save_for_backward(gate_up)
        g, u = gate_up.to(torch.float32).chunk(2, dim=-1)
        return (g * sigmoid(g) * u).to(gate_up.dtype)

    @staticmethod
    def backward(ctx, dy):
        (gate_up,) = ctx.saved_tensors
        g, u = gate_up.to(torch.float32).chunk(2, dim=-1)
        s = sigmoid(g)
        dy32 = dy.to(torch.float32)
        dg = dy32 * u * (s * (1.0 + g * (1.0 - s)))
        du = dy32 * (g * s)
        return torch.cat([dg, du], dim=-1).to(gate_up.dtype)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``[..., 2I] -> [..., I]``: silu of the first half times the second half."""
    check_silu_mul(gate_up)
    return _SiluMul.apply(gate_up)
