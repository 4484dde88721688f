"""SiLU-gated product: ``silu(gate) * up`` for the fused ``[..., 2I]`` gate|up projection.

Contract
    In fp32: ``s = sigmoid(g)`` with the primitives' ``exp`` (never ``F.silu``, whose vector body
    and scalar tail differ on CPU), then ``(g * s) * u``, rounded once to the input dtype.

Backward: ``dg = dy * u * s * (1 + g * (1 - s))``, ``du = dy * g * s`` (fp32); with ``with_act`` also
the forward's product again, from the same ``g``, ``s`` and ``u`` (``autograd.dense_ops``).
"""

from __future__ import annotations

import torch

from .primitives import sigmoid


def _product(g: torch.Tensor, s: torch.Tensor, u: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (g * s * u).to(dtype)


def silu_mul_forward(gu: torch.Tensor) -> torch.Tensor:
    """[M, 2I] -> [M, I]."""
    g, u = gu.to(torch.float32).chunk(2, dim=-1)
    return _product(g, sigmoid(g), u, gu.dtype)


def silu_mul_backward(gu: torch.Tensor, dy: torch.Tensor, with_act: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(dgu [M, 2I], the forward's product [M, I] when ``with_act``)."""
    g, u = gu.to(torch.float32).chunk(2, dim=-1)
    s = sigmoid(g)
    dy32 = dy.to(torch.float32)
    dg = dy32 * u * (s * (1.0 + g * (1.0 - s)))
    du = dy32 * (g * s)
    return torch.cat([dg, du], dim=-1).to(gu.dtype), (_product(g, s, u, gu.dtype) if with_act else None)
