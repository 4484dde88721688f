"""vLLM's paged KV cache as the ops see it, and the slot-mapping write.

The cache of one layer is addressed through its logical view ``[num_blocks, num_kv_heads,
block_size, 2 * head_size]``: K in the first half of the last dim, V in the second. Token
position p of request r lives in block ``block_table[r, p // block_size]`` at offset
``p % block_size``; vLLM's slot mapping is ``block * block_size + offset`` (-1 = padding).
Writing is a copy (no arithmetic), so it is the same for every backend.
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


def slots_for(block_table_row: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """vLLM's slot mapping for the given positions of one request."""
    return block_table_row[positions // block_size].long() * block_size + positions % block_size


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
