"""Argument checks shared by every backend's public ops: bad input fails the same way, with a
message naming what is wrong, whichever backend runs."""

from __future__ import annotations

import torch


def check_linear(x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: x has {x.shape[-1]} features, weight expects {weight.shape[1]}")


def check_embedding(ids: torch.Tensor, weight: torch.Tensor) -> None:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= weight.shape[0]):
        raise IndexError(f"embedding: token ids must lie in [0, {weight.shape[0]}), "
                         f"got range [{int(ids.min())}, {int(ids.max())}]")


def check_rope(x: torch.Tensor, positions: torch.Tensor, table: torch.Tensor) -> None:
    if x.dim() != 3 or x.shape[-1] != table.shape[-1] or positions.shape != x.shape[:1]:
        raise ValueError(f"rope: x {tuple(x.shape)}, positions {tuple(positions.shape)}, "
                         f"table {tuple(table.shape)} do not match ([T, H, D], [T], [P, D])")
    if positions.numel() and int(positions.max()) >= table.shape[0]:
        raise IndexError(f"rope: position {int(positions.max())} is past the table "
                         f"({table.shape[0]} positions = max_position_embeddings)")


def check_head(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> None:
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"logprob_head: hidden {tuple(hidden.shape)} and targets "
                         f"{tuple(targets.shape)} must be [T, K] and [T]")
    if weight.shape[0] < vocab_size or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"logprob_head: weight {tuple(weight.shape)} must be [>= {vocab_size}, {hidden.shape[1]}]")
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= vocab_size):
        raise IndexError(f"logprob_head: targets must lie in [0, {vocab_size})")
