"""Writing a step's K/V into vLLM's paged cache by slot mapping, as one Triton kernel: a copy (no
arithmetic), the same bits as the reference's ``rlk_models.ops.paged.write_kv``. Unlike the torch
form it needs no boolean indexing and reads nothing back to the host, so it is safe inside a
captured CUDA graph: padding slots (< 0) are skipped by the program that owns them."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import next_power_of_2


@triton.jit
def _write_kv_kernel(k_ptr, v_ptr, cache_ptr, slot_ptr, s_kt, s_kh, s_vt, s_vh, s_blk, s_head, s_off, block_size,
                     D: tl.constexpr, BLOCK_D: tl.constexpr):
    """Token t's head h: its K and V rows into the cache at its slot (block ``slot // block_size``,
    offset ``slot % block_size``). The slot is divided as int32 (``write_kv`` checks that the cache has
    fewer than 2**31 slots): an int64 division by a run-time block size is a subroutine call on sm_90."""
    t, h = tl.program_id(0), tl.program_id(1)
    slot = tl.load(slot_ptr + t).to(tl.int32)
    if slot >= 0:
        d = tl.arange(0, BLOCK_D)
        ok = d < D
        base = cache_ptr + (slot // block_size).to(tl.int64) * s_blk + h * s_head + (slot % block_size) * s_off
        k = tl.load(k_ptr + t.to(tl.int64) * s_kt + h * s_kh + d, mask=ok)
        v = tl.load(v_ptr + t.to(tl.int64) * s_vt + h * s_vh + d, mask=ok)
        tl.store(base + d, k.to(cache_ptr.dtype.element_ty), mask=ok)
        tl.store(base + D + d, v.to(cache_ptr.dtype.element_ty), mask=ok)


def write_kv(kv_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Store key/value [n, Hkv, D] (n >= len(slot_mapping); extra rows are padding) at their
    slots of ``kv_cache`` (logical view [blocks, Hkv, block_size, 2 D]); slots < 0 are skipped."""
    n = slot_mapping.shape[0]
    _, hkv, bs, d2 = kv_cache.shape
    if key.shape[1:] != (hkv, d2 // 2) or value.shape != key.shape or key.shape[0] < n or kv_cache.stride(3) != 1:
        raise ValueError(f"write_kv: key {tuple(key.shape)} / value {tuple(value.shape)} do not fit kv_cache "
                         f"{tuple(kv_cache.shape)} (last dim contiguous) for {n} slots")
    if kv_cache.shape[0] * bs >= 2**31:
        raise ValueError(f"write_kv: kv_cache {tuple(kv_cache.shape)} has {kv_cache.shape[0] * bs} slots; the kernel "
                         "indexes slots as int32 (< 2**31)")
    if n == 0:
        return
    if key.stride(2) != 1 or value.stride(2) != 1:
        key, value = key.contiguous(), value.contiguous()
    d = d2 // 2
    _write_kv_kernel[(n, hkv)](key, value, kv_cache, slot_mapping, key.stride(0), key.stride(1), value.stride(0),
                               value.stride(1), kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), bs, D=d,
                               BLOCK_D=next_power_of_2(d))
