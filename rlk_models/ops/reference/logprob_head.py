"""Log-prob head: lm_head matmul + log-softmax + target gather (+ entropy), one op for the
training class and the vLLM class, at any tensor-parallel degree.

What it computes
    For hidden h [T, K] and lm_head weight W (rows past ``vocab_size`` -- padding -- are never
    read): logits l = h W^T in fp32, ``lse = logsumexp(l)``, ``logp[t] = l[t, target[t]] - lse[t]``
    and optionally the entropy ``lse - sum_v p_v l_v``. ``full_logprobs`` returns ``l - lse`` for
    every vocab entry (vLLM's ``compute_logits``).

Contract: the canonical padded vocab
    The vocab is padded to ``V_pad``, the next multiple of ``VOCAB_GROUPS * VOCAB_TILE``; this
    depends on the vocab size only, never on the TP degree. It is cut into ``VOCAB_GROUPS`` = 8
    contiguous groups, each into tiles of ``VOCAB_TILE`` entries. Per tile: logits by the linear
    contract (fp32, never rounded), tile max ``m`` (exact), ``s = tree_sum(exp(l - m))`` and
    ``e = tree_sum(exp(l - m) * l)``; entries past ``vocab_size`` are absent (an all-padding tile
    is the empty tile ``m = -inf, s = e = 0``, never computed). Tiles of a group combine by an
    adjacent pairwise tree, then the 8 group results by another:
    ``M = max(ma, mb); s = sa*exp(ma-M) + sb*exp(mb-M)`` (e likewise). Finally
    ``lse = M + log(s)``, ``logp = l_target - lse``, ``entropy = lse - e / s``.
    Every number is a function of the row's own h and of W: batch-invariant. ``logp`` and
    ``full_logprobs[t, target]`` are the same subtraction of the same two fp32 numbers.

Tensor parallelism (one code path for every TP size)
    A rank of k (k | 8) owns the contiguous vocab slice of 8/k whole groups
    (``vocab_shard``); ``shard_stats`` reduces its tiles and groups -- a subtree of the
    canonical tree -- and ``combine_shards`` finishes the tree over the ranks' stats gathered in
    rank order. TP=1 is the same two calls with one shard, so TP=k gives TP=1's bits.

Memory: one [T, VOCAB_TILE] tile at a time; training never holds [T, V].

Backward (deterministic; tiles recomputed, in order)
    dl = g_logp * (onehot(target) - p) - g_ent * p * (l - e/s),  p = exp(l - lse);
    dh = sum over tiles (in tile order) of dl_tile @ W_tile;  dW_tile = dl_tile^T @ h.
"""

from __future__ import annotations

import torch

from ..autograd import head_ops
from ..canonical import LINEAR_K_GROUPS, VOCAB_GROUPS, VOCAB_TILE, ShardStats, padded_vocab
from .linear import linear_fwd
from .primitives import exp, log, matmul_nt, tree_sum


def _tile_stats(l: torch.Tensor, with_entropy: bool):
    m = l.amax(dim=-1)
    p = exp(l - m[:, None])
    s = tree_sum(p)
    e = tree_sum(p * l) if with_entropy else torch.zeros_like(s)
    return m, s, e


def _combine(m: torch.Tensor, s: torch.Tensor, e: torch.Tensor):
    """Adjacent pairwise tree over the last dim of (max, sum, entropy-sum) stats."""
    n = m.shape[-1]
    p = 1 << max(n - 1, 0).bit_length()
    if p != n:
        pad = (*m.shape[:-1], p - n)
        m = torch.cat([m, m.new_full(pad, float("-inf"))], dim=-1)
        s = torch.cat([s, s.new_zeros(pad)], dim=-1)
        e = torch.cat([e, e.new_zeros(pad)], dim=-1)
    while m.shape[-1] > 1:
        ma, mb = m[..., 0::2], m[..., 1::2]
        mx = torch.maximum(ma, mb)
        fa = torch.where(ma == float("-inf"), torch.zeros_like(mx), exp(ma - mx))
        fb = torch.where(mb == float("-inf"), torch.zeros_like(mx), exp(mb - mx))
        s = s[..., 0::2] * fa + s[..., 1::2] * fb
        e = e[..., 0::2] * fa + e[..., 1::2] * fb
        m = mx
    return m[..., 0], s[..., 0], e[..., 0]


def shard_stats(h: torch.Tensor, w_shard: torch.Tensor, shard: tuple[int, int], vocab_size: int,
                targets: torch.Tensor | None, *, with_entropy: bool, keep_logits: bool = False) -> ShardStats:
    """Stats of one vocab shard ``[start, end)`` (rows of ``w_shard``), its tiles and groups
    combined (``canonical.ShardStats``)."""
    start, end = shard
    n_groups = (end - start) * VOCAB_GROUPS // padded_vocab(vocab_size)
    tiles_per_group = padded_vocab(vocab_size) // VOCAB_GROUPS // VOCAB_TILE
    t = h.shape[0]
    m = torch.full((t, n_groups * tiles_per_group), float("-inf"), device=h.device)
    s = torch.zeros(t, n_groups * tiles_per_group, device=h.device)
    e = torch.zeros_like(s)
    tgt = torch.zeros(t, device=h.device)
    kept = [h.new_zeros(t, 0, dtype=torch.float32)]
    for i, a in enumerate(range(start, min(end, vocab_size), VOCAB_TILE)):
        b = min(a + VOCAB_TILE, vocab_size)
        l = linear_fwd(h, w_shard[a - start:b - start], None)
        m[:, i], s[:, i], e[:, i] = _tile_stats(l, with_entropy)
        if targets is not None:
            here = (targets >= a) & (targets < b)
            picked = l.gather(1, (targets - a).clamp(0, b - a - 1)[:, None])[:, 0]
            tgt = torch.where(here, picked, tgt)
        if keep_logits:
            kept.append(l)
    shape = (t, n_groups, tiles_per_group)
    m, s, e = _combine(*(x.view(shape) for x in (m, s, e)))   # tiles of each group
    m, s, e = _combine(m, s, e)                                 # this shard's groups
    return ShardStats(m, s, e, tgt, torch.cat(kept, dim=-1) if keep_logits else None)


def combine_shards(m: torch.Tensor, s: torch.Tensor, e: torch.Tensor, tgt: torch.Tensor):
    """Finish the canonical tree over per-rank stats stacked in rank order ([k, T] each):
    (lse, e/s, target logit) [T]."""
    M, S, E = _combine(m.t(), s.t(), e.t())
    lse = M + log(S)
    target = tgt.sum(0)  # one rank holds the target logit, the others exact zeros: exact
    return lse, E / S, target


def _backward(h, w, targets, lse, mean_l, vocab_size, g_logp, g_ent, need_dw):
    """(dh, dw): tiles recomputed in order, dl as in the module docstring, fp32 accumulation."""
    dh = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
    dw = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if need_dw else None
    for a in range(0, vocab_size, VOCAB_TILE):
        b = min(a + VOCAB_TILE, vocab_size)
        l = linear_fwd(h, w[a:b], None)
        p = exp(l - lse[:, None])
        dl = -(g_logp[:, None] * p)
        inside = (targets >= a) & (targets < b)
        cols = (targets - a).clamp(0, b - a - 1)[:, None]
        dl.scatter_(1, cols, dl.gather(1, cols) + torch.where(inside, g_logp, 0.0)[:, None])
        if g_ent is not None:
            dl = dl - g_ent.to(torch.float32)[:, None] * p * (l - mean_l[:, None])
        dh = dh + matmul_nt(dl, w[a:b].t(), LINEAR_K_GROUPS)
        if dw is not None:
            dw[a:b] = matmul_nt(dl.t(), h.t(), LINEAR_K_GROUPS)
    return dh.to(h.dtype), (dw.to(w.dtype) if dw is not None else None)


logprob_head, full_logprobs, head_stats = head_ops(shard_stats, combine_shards, _backward)

__all__ = ["combine_shards", "full_logprobs", "head_stats", "logprob_head", "shard_stats"]
