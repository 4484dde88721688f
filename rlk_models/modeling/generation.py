"""KV-cached decoding for the training class's ``generate()``: a paged cache over the backend's
``write_kv`` / ``paged_attention`` (the ops vLLM's attention backend calls), so there is no
second attention implementation and a generated sequence's log-probs are the bits
``token_logprobs`` gives for it (prefill, decode and the varlen path agree by the contract).

``RLKCache`` is what ``generate`` carries between steps (transformers' ``Cache`` interface, as
far as generation uses it): per layer ``[num_blocks, Hkv, BLOCK_SIZE, 2 D]`` caches, each row's
block table and its context length. Rows are packed by ``attention_mask``: padding (left or
right) never enters the cache, and a row's positions count its real tokens only. The cache grows
by whole blocks (doubling) as rows get longer. During cached decoding the model's ``logits`` are the
log-prob head's fp32 log-probs (what the vLLM class's ``compute_logits`` returns; softmax and
argmax see the same distribution), so ``output_logits`` gathered at the generated tokens equal
``token_logprobs`` bit for bit.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from ..ops.paged import slots_for
from .decoder import PagedMeta

BLOCK_SIZE = 16


class RLKCache(Cache):
    """Paged KV cache of one ``generate`` call (batch rows fixed at creation)."""

    is_compileable = False

    def __init__(self, config, batch_size: int, device: torch.device, dtype: torch.dtype):
        super().__init__(layers=[])
        self.n_layers, self.hkv, self.head_dim = config.num_hidden_layers, config.num_key_value_heads, config.head_dim
        self.device, self.dtype = device, dtype
        self.caches: list[torch.Tensor] = [self._blocks(0) for _ in range(self.n_layers)]
        self.block_table = torch.zeros(batch_size, 0, dtype=torch.int32, device=device)
        self.lengths = torch.zeros(batch_size, dtype=torch.int32, device=device)

    def _blocks(self, n: int) -> torch.Tensor:
        return torch.zeros(n, self.hkv, BLOCK_SIZE, 2 * self.head_dim, dtype=self.dtype, device=self.device)

    def __len__(self) -> int:
        return self.n_layers

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return int(self.lengths.max()) if self.lengths.numel() else 0

    def reserve(self, new_lengths: torch.Tensor) -> None:
        """Give every row blocks for ``new_lengths`` tokens: new blocks are appended to each row's
        table, at least doubling it, so that a long generation reallocates the caches O(log n) times
        rather than once per block."""
        need = -(-int(new_lengths.max()) // BLOCK_SIZE)
        have = self.block_table.shape[1]
        if need <= have:
            return
        rows, extra = self.block_table.shape[0], max(need, 2 * have) - have
        first = self.caches[0].shape[0]
        new_ids = torch.arange(first, first + rows * extra, dtype=torch.int32, device=self.device).view(rows, extra)
        self.block_table = torch.cat([self.block_table, new_ids], dim=1)
        self.caches = [torch.cat([c, self._blocks(rows * extra)]) for c in self.caches]

    def reorder_cache(self, beam_idx: torch.Tensor):
        raise NotImplementedError("rlk generate() supports greedy and sampling, not beam search")

    def crop(self, max_length: int):
        raise NotImplementedError("rlk generate() does not support assisted decoding (cache cropping)")


def cached_step(model, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
                inputs_embeds: torch.Tensor | None, cache: RLKCache,
                logits_to_keep: int | torch.Tensor = 0) -> torch.Tensor:
    """Run the new tokens of a [B, Q] step (the last Q columns of ``attention_mask`` mark which are
    real) through the cache; fp32 log-probs [B, Q or kept, V]. Entries at padding are 0, except
    that column -1 of each row holds its last real token's log-probs (its next-token
    distribution: this is what makes right-padded prompts generate correctly)."""
    ref = input_ids if input_ids is not None else inputs_embeds
    b, q = ref.shape[:2]
    dev = ref.device
    if b != cache.block_table.shape[0]:
        raise ValueError(f"generate: the cache holds {cache.block_table.shape[0]} rows, the step has {b}")
    if attention_mask is None:
        real = torch.ones(b, q, dtype=torch.bool, device=dev)
    elif attention_mask.dim() != 2 or attention_mask.shape[0] != b or attention_mask.shape[1] < q:
        raise ValueError(f"generate: attention_mask {tuple(attention_mask.shape)} must be [B, >= {q}] (2-D)")
    else:
        real = attention_mask[:, -q:].bool()
    n_new = real.sum(1).to(torch.int32)
    seq_lens = cache.lengths + n_new
    cache.reserve(seq_lens)
    positions = (cache.lengths[:, None] + real.cumsum(1) - 1)[real]          # [T], row-major
    rows = torch.arange(b, device=dev)[:, None].expand(b, q)[real]
    slots = slots_for(cache.block_table, positions, BLOCK_SIZE, rows)
    qsl = torch.zeros(b + 1, dtype=torch.int32, device=dev)
    qsl[1:] = n_new.cumsum(0)
    meta = PagedMeta(cache.caches, cache.block_table, seq_lens, qsl, slots)
    ids = input_ids[real] if input_ids is not None else None
    embeds = inputs_embeds[real] if inputs_embeds is not None else None
    hidden = model.model(ids, positions.long(), meta, embeds)
    cache.lengths = seq_lens

    flat = torch.nonzero(real.reshape(-1))[:, 0]                              # [T] in the [B*Q] grid
    last = qsl[1:].long() - 1                                                 # each row's last real token
    has = n_new > 0
    if isinstance(logits_to_keep, int) and logits_to_keep > 0:
        cols = torch.arange(q - logits_to_keep, q, device=dev)
    elif isinstance(logits_to_keep, int):
        cols = torch.arange(q, device=dev)
    else:
        cols = logits_to_keep.to(dev).reshape(-1)
    grid = torch.full((b * q,), -1, dtype=torch.long, device=dev)             # packed index of each cell
    grid[flat] = torch.arange(flat.numel(), device=dev)
    grid = grid.view(b, q)
    grid[has, -1] = last[has]
    pick = grid[:, cols]                                                      # [B, kept]
    want = pick >= 0
    vocab = model.config.vocab_size
    out = hidden.new_zeros(b, cols.numel(), vocab, dtype=torch.float32)
    if bool(want.any()):
        out[want] = model.ops.full_logprobs(hidden[pick[want]], model.lm_head.weight, vocab)
    return out
