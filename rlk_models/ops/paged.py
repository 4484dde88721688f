"""vLLM's paged KV cache as the ops see it, and the slot-mapping write.

The cache of one layer is addressed through its logical view ``[num_blocks, num_kv_heads,
block_size, 2 * head_size]``: K in the first half of the last dim, V in the second. Token
position p of request r lives in block ``block_table[r, p // block_size]`` at offset
``p % block_size``; vLLM's slot mapping is ``block * block_size + offset`` (-1 = padding).
Writing is a copy (no arithmetic): ``write_kv`` here is the reference form (torch, boolean
indexing); the Triton backend writes the same bits with a kernel that a CUDA graph can capture.
"""

from __future__ import annotations

import torch


def write_kv(kv_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Store key/value [n, Hkv, D] (n >= len(slot_mapping); extra rows are padding) at their
    slots; slots < 0 are skipped."""
    n = slot_mapping.shape[0]
    bs, d = kv_cache.shape[2], kv_cache.shape[3] // 2
    slots = slot_mapping.long()
    valid = slots >= 0
    blk, off = slots[valid] // bs, slots[valid] % bs
    kv_cache[blk, :, off, :d] = key[:n][valid].to(kv_cache.dtype)
    kv_cache[blk, :, off, d:] = value[:n][valid].to(kv_cache.dtype)


def slots_for(block_table: torch.Tensor, positions: torch.Tensor, block_size: int,
              rows: torch.Tensor | None = None) -> torch.Tensor:
    """vLLM's slot mapping for the given positions of one request (``block_table``: its row), or,
    with ``rows`` [T] naming each position's request, of a whole step (``block_table`` [R, blocks])."""
    blocks = block_table[positions // block_size] if rows is None else block_table[rows, positions // block_size]
    return blocks.long() * block_size + positions % block_size
