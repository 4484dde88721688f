"""rlk attention backend for vLLM: vLLM's paged KV cache, our numerics.

vLLM allocates the paged cache and builds ``CommonAttentionMetadata`` (query_start_loc,
seq_lens, block table, slot mapping); this backend writes K/V by slot and, for each request
scheduled in the step, gathers exactly its context from the block table and calls the op
backend's ``attend`` -- the same row function the training path's varlen attention calls.
So a token's attention output is bitwise the training one whether it is computed in a
prefill, a chunked prefill, a decode step or after a prefix-cache hit, with any block size
and any number of sequences in the step. One call per request, never per token.

Forced per layer with ``Attention(..., attn_backend=RLKAttentionBackend)``; registered in
vLLM's reserved ``CUSTOM`` slot by the plugin. The KV cache is addressed through its logical
view ``[num_blocks, num_kv_heads, block_size, 2 * head_size]`` (K then V), valid for any
physical layout vLLM picks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadata,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)

from ..ops import get_backend


class RLKAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = False  # vLLM calls do_kv_cache_update, then forward
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto", "bfloat16", "float16", "float32"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"  # an AttentionBackendEnum member; the plugin registers this class there

    @staticmethod
    def get_impl_cls():
        return RLKAttentionImpl

    @staticmethod
    def get_builder_cls():
        return RLKAttentionMetadataBuilder


@dataclass
class RLKAttentionMetadata(AttentionMetadata):
    num_actual_tokens: int
    query_start_loc: list[int]
    seq_lens: list[int]
    block_table: torch.Tensor   # [num_reqs, max_blocks]
    slot_mapping: torch.Tensor  # [num_tokens], -1 = padding


class RLKAttentionMetadataBuilder(AttentionMetadataBuilder[RLKAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> RLKAttentionMetadata:
        m = common_attn_metadata
        return RLKAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            query_start_loc=m.query_start_loc_cpu[: m.num_reqs + 1].tolist(),
            seq_lens=m.seq_lens[: m.num_reqs].cpu().tolist(),
            block_table=m.block_table_tensor,
            slot_mapping=m.slot_mapping,
        )


class RLKAttentionImpl(AttentionImpl[RLKAttentionMetadata]):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                 sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                 attn_type=AttentionType.DECODER, kv_sharing_target_layer_name=None, **extra):
        if alibi_slopes is not None or sliding_window is not None or logits_soft_cap:
            raise NotImplementedError("rlk attention: no ALiBi, sliding window or soft cap")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"rlk attention: only decoder attention, got {attn_type}")
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.rlk_backend = extra.get("rlk_backend", "reference")

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping):
        n = slot_mapping.shape[0]
        slots = slot_mapping.long()
        valid = slots >= 0
        bs, d = kv_cache.shape[2], self.head_size
        blk, off = slots[valid] // bs, slots[valid] % bs
        kv_cache[blk, :, off, :d] = key[:n][valid].view(-1, self.num_kv_heads, d).to(kv_cache.dtype)
        kv_cache[blk, :, off, d:] = value[:n][valid].view(-1, self.num_kv_heads, d).to(kv_cache.dtype)

    def _context(self, kv_cache, block_table_rows, seq_lens: torch.Tensor):
        """K/V of each request's context, [R, L_max, Hkv, D] each; positions past a request's
        own length are zeroed (masked anyway; zeros keep stale cache bits out of the sums)."""
        d, bs = self.head_size, kv_cache.shape[2]
        l_max = int(seq_lens.max())
        nblk = -(-l_max // bs)
        ctx = kv_cache[block_table_rows[:, :nblk].long()]            # [R, nblk, Hkv, bs, 2D]
        ctx = ctx.permute(0, 1, 3, 2, 4).reshape(ctx.shape[0], nblk * bs, self.num_kv_heads, 2 * d)[:, :l_max]
        valid = torch.arange(l_max, device=ctx.device) < seq_lens[:, None].to(ctx.device)
        ctx = torch.where(valid[..., None, None], ctx, torch.zeros((), dtype=ctx.dtype, device=ctx.device))
        return ctx[..., :d], ctx[..., d:]

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if attn_metadata is None:  # profiling / warm-up run
            return output.fill_(0)
        md, d = attn_metadata, self.head_size
        ops = get_backend(self.rlk_backend)
        q_all = query.view(-1, self.num_heads, d)
        out = output.view(-1, self.num_heads, d)
        qsl = md.query_start_loc
        decode = [r for r in range(len(md.seq_lens)) if qsl[r + 1] - qsl[r] == 1]
        if decode:  # all single-token requests in one batched call
            rows = torch.tensor([qsl[r] for r in decode], device=query.device)
            lens = torch.tensor([md.seq_lens[r] for r in decode], device=query.device)
            k, v = self._context(kv_cache, md.block_table[decode], lens)
            out[rows] = ops.attend(q_all[rows][:, None], k, v, (lens - 1)[:, None], self.scale)[:, 0]
        for r, seq_len in enumerate(md.seq_lens):  # prefills and prefill chunks, one call each
            q0, q1 = qsl[r], qsl[r + 1]
            if q1 - q0 < 2:
                continue
            k, v = self._context(kv_cache, md.block_table[r:r + 1], torch.tensor([seq_len]))
            q_pos = torch.arange(seq_len - (q1 - q0), seq_len, device=query.device)
            out[q0:q1] = ops.attend(q_all[q0:q1], k[0], v[0], q_pos, self.scale)
        return output
