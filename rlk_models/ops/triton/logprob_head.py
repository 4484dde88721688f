"""Fused log-prob head forward in Triton: lm_head matmul + per-tile log-sum-exp stats + target
gather, never materialising [T, V]. Work in progress (backward to come).

Contract
    The canonical vocab tiling of ``rlk_models.ops.reference.logprob_head``: tiles of
    ``VOCAB_TILE`` = 256 entries from index 0 inside 8 canonical vocab groups. One kernel
    computes, for a block of rows and one vocab tile, the fp32 logits by the matmul contract
    (fixed ``BLOCK_K`` walked in order, ``tl.dot`` accumulation), the tile max, the tile
    ``sum(exp(l - max))`` (``tl.sum`` over the 256-wide tile: a tree fixed by the tile width) and
    the target logit (written by the one tile that holds the target). Only these stats ([tiles, T]
    fp32) are written. A second kernel combines a row's tiles in the canonical order: an
    adjacent pairwise tree over the tiles of each vocab group (padded to a power of two with
    empty tiles), then one over the 8 groups, ``M = max(ma, mb); s = sa*exp(ma-M) + sb*exp(mb-M)``
    with ``tl.exp``; then ``logp = l_target - (M + log(s))``. Same tree as the reference, its own
    transcendentals: self-consistent bits, reference-level accuracy. Row-invariant: no number
    depends on other rows.

Memory: the stats are 2 x T x ceil(V/256) fp32 (+ T): 1/128 of fp32 [T, V] logits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..reference.logprob_head import VOCAB_GROUPS, VOCAB_TILE, padded_vocab
from .matmul import BLOCK_K


@triton.jit
def _head_stats_kernel(h_ptr, w_ptr, tgt_ptr, m_ptr, s_ptr, t_ptr, T, V, K, n_tiles,
                       BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, NUM_PROGS: tl.constexpr):
    num_pid_m = tl.cdiv(T, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    for tile in range(tl.program_id(0), num_pid_m * n_tiles, NUM_PROGS):
        pid_v = tile // num_pid_m  # neighbouring programs share a weight tile
        pid_m = tile % num_pid_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rv = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
        acc = tl.zeros((BLOCK_M, BLOCK_V), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):  # the fixed K order of the matmul contract
            k = k0 + rk
            a = tl.load(h_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < T) & (k[None, :] < K), other=0.0)
            b = tl.load(w_ptr + rv[None, :] * K + k[:, None], mask=(k[:, None] < K) & (rv[None, :] < V), other=0.0)
            acc = tl.dot(a, b, acc)
        acc = tl.where(rv[None, :] < V, acc, float("-inf"))
        mx = tl.max(acc, axis=1)
        s = tl.sum(tl.exp(acc - mx[:, None]), axis=1)
        tgt = tl.load(tgt_ptr + rm, mask=rm < T, other=-1)
        inside = (tgt >= pid_v * BLOCK_V) & (tgt < pid_v * BLOCK_V + BLOCK_V)
        hit = tl.sum(tl.where(rv[None, :] == tgt[:, None], acc, 0.0), axis=1)  # one nonzero term at most
        out = pid_v * T + rm
        tl.store(m_ptr + out, mx, mask=rm < T)
        tl.store(s_ptr + out, s, mask=rm < T)
        tl.store(t_ptr + rm, hit, mask=(rm < T) & inside)


@triton.jit
def _tree(m, s, N: tl.constexpr, LEVELS: tl.constexpr):
    """Adjacent pairwise (max, sum-exp) tree over the last dim (size 2**LEVELS) of [N, 2**LEVELS]."""
    for lvl in tl.static_range(LEVELS):
        ma, mb = tl.split(tl.reshape(m, (N, 1 << (LEVELS - 1 - lvl), 2)))
        sa, sb = tl.split(tl.reshape(s, (N, 1 << (LEVELS - 1 - lvl), 2)))
        mx = tl.maximum(ma, mb)
        fa = tl.where(ma == float("-inf"), 0.0, tl.exp(ma - mx))
        fb = tl.where(mb == float("-inf"), 0.0, tl.exp(mb - mx))
        s = sa * fa + sb * fb
        m = mx
    return tl.reshape(m, (N,)), tl.reshape(s, (N,))


@triton.jit
def _combine_kernel(m_ptr, s_ptr, t_ptr, out_ptr, T, n_tiles, TPG: tl.constexpr, LEVELS: tl.constexpr,
                    G: tl.constexpr, G_LEVELS: tl.constexpr):
    row = tl.program_id(0)
    g = tl.arange(0, G)[:, None]
    j = tl.arange(0, 1 << LEVELS)[None, :]
    tile = g * TPG + j
    ok = (j < TPG) & (tile < n_tiles)
    m = tl.load(m_ptr + tile * T + row, mask=ok, other=float("-inf"))
    s = tl.load(s_ptr + tile * T + row, mask=ok, other=0.0)
    m, s = _tree(m, s, G, LEVELS)                      # tiles of each group
    m, s = _tree(tl.reshape(m, (1, G)), tl.reshape(s, (1, G)), 1, G_LEVELS)  # the 8 groups
    lse = tl.sum(m, axis=0) + tl.log(tl.sum(s, axis=0))
    tl.store(out_ptr + row, tl.load(t_ptr + row) - lse)


def head_stats(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab_size: int,
               block_m: int | None = None, num_warps: int = 8):
    """Per-tile (max, sum exp) [n_tiles, T] over the real vocab, and the target logit [T]."""
    t, k = hidden.shape
    block_m = block_m or (64 if t <= 64 else 128)  # any block gives the same bits (the K order is fixed)
    n_tiles = triton.cdiv(vocab_size, VOCAB_TILE)
    m = torch.empty(n_tiles, t, dtype=torch.float32, device=hidden.device)
    s = torch.empty_like(m)
    tl_ = torch.empty(t, dtype=torch.float32, device=hidden.device)
    progs = triton.cdiv(t, block_m) * n_tiles
    if hidden.is_cuda:
        progs = min(progs, 4 * torch.cuda.get_device_properties(hidden.device).multi_processor_count)
    _head_stats_kernel[(progs,)](hidden.contiguous(), weight, targets.contiguous(), m, s, tl_, t, vocab_size, k,
                                 n_tiles, BLOCK_M=block_m, BLOCK_V=VOCAB_TILE, BLOCK_K=BLOCK_K, NUM_PROGS=progs,
                                 num_warps=num_warps)
    return m, s, tl_


@torch.no_grad()
def logprob_head_forward(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab_size: int):
    """fp32 log p(targets[t] | hidden[t]) [T] through the canonical tile/group trees."""
    m, s, tgt = head_stats(hidden, weight, targets, vocab_size)
    t = hidden.shape[0]
    tpg = padded_vocab(vocab_size) // VOCAB_GROUPS // VOCAB_TILE
    out = torch.empty(t, dtype=torch.float32, device=hidden.device)
    if t:
        _combine_kernel[(t,)](m, s, tgt, out, t, m.shape[0], TPG=tpg, LEVELS=max(tpg - 1, 0).bit_length(),
                              G=VOCAB_GROUPS, G_LEVELS=(VOCAB_GROUPS - 1).bit_length())
    return out
