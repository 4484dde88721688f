"""Rotary-embedding tables, built the same way for every backend and every model class.

The table is a function of (head_dim, rope parameters) and of nothing else: angles
``p * inv_freq`` and their cos/sin are computed in float64 on the CPU, in blocks of
``_BLOCK`` positions padded to full size (each block is one single-threaded torch call of the
same shape), then rounded to float32. A position's row is therefore bit-identical whatever the
table length, thread count or device it is later moved to. Supported ``rope_type``: ``default``
and ``llama3`` (transformers' formulas, evaluated in float64).
"""

from __future__ import annotations

import math

import torch

_BLOCK = 64  # positions per torch call: <= 64 * 256 elements, below torch's parallel grain


class UnsupportedRope(ValueError):
    pass


def rope_inv_freq(head_dim: int, rope_parameters: dict) -> torch.Tensor:
    """float64 [head_dim // 2] inverse frequencies for ``rope_parameters`` (HF's format)."""
    rope_type = rope_parameters.get("rope_type", "default")
    base = float(rope_parameters["rope_theta"])
    if rope_parameters.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedRope("rope: partial_rotary_factor != 1 is not supported")
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device="cpu") / head_dim))
    if rope_type == "default":
        return inv
    if rope_type == "llama3":
        factor = float(rope_parameters["factor"])
        low, high = float(rope_parameters["low_freq_factor"]), float(rope_parameters["high_freq_factor"])
        old_len = float(rope_parameters["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old_len / low, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return torch.where(medium, smoothed, scaled)
    raise UnsupportedRope(
        f"rope: rope_type {rope_type!r} is not supported (supported: 'default', 'llama3')")


def rope_table(head_dim: int, max_positions: int, rope_parameters: dict) -> torch.Tensor:
    """float32 [max_positions, head_dim]: cos of the angles in the first half, sin in the second.
    Always computed on the CPU (whatever device context the caller is in: transformers builds
    models under ``torch.device(...)``), so that every engine gets the same table."""
    if head_dim % 2:
        raise UnsupportedRope(f"rope: head_dim must be even, got {head_dim}")
    inv = rope_inv_freq(head_dim, rope_parameters)
    n_blocks = -(-max_positions // _BLOCK)
    out = torch.empty(n_blocks * _BLOCK, head_dim, dtype=torch.float32, device="cpu")
    offs = torch.arange(_BLOCK, dtype=torch.float64, device="cpu")[:, None]
    for b in range(n_blocks):
        ang = (offs + b * _BLOCK) * inv[None, :]
        out[b * _BLOCK:(b + 1) * _BLOCK] = torch.cat([ang.cos(), ang.sin()], dim=-1).to(torch.float32)
    return out[:max_positions].contiguous()
