"""A paged-KV-cache runner that reproduces vLLM's paging without vLLM: the check of the rollout
path on machines where vLLM does not run (the lent GPU), and a second witness on CPU.

It runs the training model's own decoder with ``PagedMeta``: its attention writes K/V by vLLM's
slot mapping into per-layer caches (the logical layout of ``rlk_models.ops.paged``) and calls the
backend's ``paged_attention`` -- exactly what ``RLKAttentionImpl`` does inside vLLM. A scheduler mimics
vLLM's: requests arrive at staggered steps, prompts are prefilled in chunks under a per-step
token budget, then every request decodes one token per step, decode tokens and prefill chunks
share a step, and blocks are allocated from a shuffled free list (random block tables). The
log-prob of each scheduled token's successor comes from the backend's ``full_logprobs`` (what
vLLM's ``compute_logits`` returns) -- teacher-forced, so they compare one to one with the
training class's ``packed_token_logprobs`` for the same sequences.
"""

from __future__ import annotations

import torch

from ..modeling.decoder import PagedMeta
from ..ops import get_backend
from ..ops.paged import slots_for


class PagedRunner:
    """Teacher-forced rollout of a training-class model through a paged cache."""

    def __init__(self, model, block_size: int = 16, num_blocks: int | None = None, seed: int = 0):
        cfg = model.config
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.decoder = model.model
        self.head = model.lm_head.weight
        self.cfg, self.block_size, self.num_blocks = cfg, block_size, num_blocks
        self.gen = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def logprobs(self, sequences: list[list[int]], prefill_lens: list[int], token_budget: int = 64,
                 arrivals: list[int] | None = None) -> list[torch.Tensor]:
        """For each sequence, fp32 [L - 1]: log p(token i+1 | tokens 0..i), computed by prefilling
        ``prefill_lens[s]`` tokens in chunks (at most ``token_budget`` tokens per step across all
        requests, decodes first, as vLLM schedules) and decoding the rest one token per step.
        ``arrivals[s]``: the step at which request s is admitted."""
        n = len(sequences)
        if len(prefill_lens) != n or any(not 0 <= p < max(len(s), 1) for p, s in zip(prefill_lens, sequences)):
            raise ValueError(f"prefill_lens {prefill_lens} must give each sequence a prefill in [0, len - 1) "
                             f"(lengths {[len(s) for s in sequences]})")
        arrivals = arrivals or [0] * n
        num_blocks = self.num_blocks or sum(-(-len(s) // self.block_size) for s in sequences) + 3
        hkv, d = self.cfg.num_key_value_heads, self.cfg.head_dim
        caches = [torch.full((num_blocks, hkv, self.block_size, 2 * d), float("nan"), dtype=self.dtype,
                             device=self.device)
                  for _ in range(self.cfg.num_hidden_layers)]  # NaN: any read of an unwritten slot would show
        free = torch.randperm(num_blocks, generator=self.gen).tolist()
        tables: list[list[int]] = [[] for _ in range(n)]
        done = [0] * n                                          # tokens already in the cache
        out = [torch.zeros(max(len(s) - 1, 0), dtype=torch.float32) for s in sequences]
        step = 0
        while any(done[s] < len(sequences[s]) - 1 for s in range(n)):
            active = [s for s in range(n) if arrivals[s] <= step and done[s] < len(sequences[s]) - 1]
            sched = _schedule(active, done, prefill_lens, token_budget)
            step += 1
            for s, take in sched:                               # allocate blocks from the free list
                while len(tables[s]) * self.block_size < done[s] + take:
                    tables[s].append(free.pop())
            if sched:
                picked = self._step(sequences, sched, done, tables, caches)
                for (s, take), a in zip(sched, torch.tensor([0] + [t for _, t in sched]).cumsum(0).tolist()):
                    out[s][done[s]:done[s] + take] = picked[a:a + take]
                    done[s] += take
        return out

    def _step(self, sequences, sched, done, tables, caches) -> torch.Tensor:
        """Run one scheduled step; the log-prob of each scheduled token's successor [n]."""
        ids, pos, slots, targets, qsl, lens = [], [], [], [], [0], []
        for s, take in sched:
            seq = sequences[s]
            p = torch.arange(done[s], done[s] + take)
            ids.append(torch.tensor(seq[done[s]:done[s] + take]))
            pos.append(p)
            slots.append(slots_for(torch.tensor(tables[s], dtype=torch.int32), p, self.block_size))
            targets.append(torch.tensor(seq[done[s] + 1:done[s] + take + 1]))
            qsl.append(qsl[-1] + take)
            lens.append(done[s] + take)
        bt = torch.zeros(len(sched), max(len(tables[s]) for s, _ in sched), dtype=torch.int32)
        for i, (s, _) in enumerate(sched):
            bt[i, :len(tables[s])] = torch.tensor(tables[s], dtype=torch.int32)
        dev = self.device
        meta = PagedMeta(caches, bt.to(dev), torch.tensor(lens, dtype=torch.int32, device=dev),
                         torch.tensor(qsl, dtype=torch.int32, device=dev), torch.cat(slots).to(dev))
        hidden = self.decoder(torch.cat(ids).to(dev), torch.cat(pos).to(dev), meta)
        logp = get_backend(self.cfg.rlk_backend).full_logprobs(hidden, self.head, self.cfg.vocab_size)
        return logp.gather(1, torch.cat(targets).to(dev)[:, None])[:, 0].float().cpu()


def _schedule(active: list[int], done: list[int], prefill_lens: list[int], budget: int) -> list[tuple[int, int]]:
    """vLLM's order within a step's token budget: decodes first, then prefill chunks;
    (request, number of tokens)."""
    sched = []
    for s in active:
        if done[s] >= prefill_lens[s] and budget:
            sched.append((s, 1))
            budget -= 1
    for s in active:
        if done[s] < prefill_lens[s] and budget:
            take = min(prefill_lens[s] - done[s], budget)
            sched.append((s, take))
            budget -= take
    return sched


def training_logprobs(model, sequences: list[list[int]]) -> list[torch.Tensor]:
    """The training class's teacher-forced log-probs of the same sequences, packed in one batch."""
    dev = next(model.parameters()).device
    ids = torch.tensor([t for s in sequences for t in s], device=dev)
    cu = torch.tensor([0] + torch.tensor([len(s) for s in sequences]).cumsum(0).tolist(), device=dev)
    with torch.no_grad():
        lp = model.packed_token_logprobs(ids, cu).float().cpu()
    return [lp[int(a):int(b) - 1] for a, b in zip(cu[:-1], cu[1:])]
