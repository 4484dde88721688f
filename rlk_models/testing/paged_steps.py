"""Paged-cache test harness: random block tables and the replay of packed sequences through a
paged cache step by step (decodes and prefill chunks mixed), as vLLM schedules them. Used by
the kernel tests and the H200 sweep."""

from __future__ import annotations

import torch

from ..ops.paged import slots_for, write_kv


def random_block_table(lens: list[int], block_size: int, gen: torch.Generator, spare: int = 2,
                       device: torch.device | str = "cpu") -> tuple[torch.Tensor, int]:
    """Block tables [R, max_blocks] int32 for contexts of ``lens`` tokens, blocks drawn from a
    shuffled pool (block ids in no particular order, as a long-running vLLM hands them out),
    and the pool size (the blocks needed plus ``spare`` never used)."""
    need = [-(-n // block_size) for n in lens]
    pool = sum(need) + spare
    perm = torch.randperm(pool, generator=gen).to(torch.int32)
    table = torch.zeros(len(lens), max(need), dtype=torch.int32)
    for r, (a, n) in enumerate(zip(torch.tensor([0] + need).cumsum(0).tolist(), need)):
        table[r, :n] = perm[a:a + n]
    return table.to(device), pool


def paged_steps(cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, lens: list[int],
                block_table: torch.Tensor, chunker):
    """Replay one layer's schedule of packed sequences (k, v [T, Hkv, D] split at ``cu_seqlens``)
    through a paged cache: each step, every unfinished sequence takes ``chunker(remaining)``
    tokens (1 = a decode, more = a prefill chunk), their K/V are written by slot mapping, and the
    step is yielded as (token rows [n], block-table rows, seq_lens, query_start_loc) -- the
    arguments of one ``paged_attention`` call, decodes and chunks mixed."""
    dev, bs = cache.device, cache.shape[2]
    done = [0] * len(lens)
    while any(d < n for d, n in zip(done, lens)):
        reqs, rows, qsl, seq_lens, slots = [], [], [0], [], []
        for r, n in enumerate(lens):
            if done[r] >= n:
                continue
            take = min(chunker(n - done[r]), n - done[r])
            a = int(cu_seqlens[r]) + done[r]
            pos = torch.arange(done[r], done[r] + take, device=block_table.device)
            reqs.append(r)
            rows.append(torch.arange(a, a + take))
            qsl.append(qsl[-1] + take)
            seq_lens.append(done[r] + take)
            slots.append(slots_for(block_table[r], pos, bs))
            done[r] += take
        idx = torch.cat(rows).to(dev)
        write_kv(cache, k[idx], v[idx], torch.cat(slots).to(dev))
        yield (idx, block_table[reqs], torch.tensor(seq_lens, dtype=torch.int32, device=dev),
               torch.tensor(qsl, dtype=torch.int32, device=dev))
