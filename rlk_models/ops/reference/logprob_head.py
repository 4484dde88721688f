"""Log-prob head: lm_head matmul + log-softmax + target gather (+ entropy), one op for both
the training class and the vLLM class.

What it computes
    For hidden h [T, K] and lm_head weight W [>= V, K] (rows past ``vocab_size`` -- vLLM's
    padding -- are ignored): logits l = h W^T in fp32, ``lse = logsumexp(l)``,
    ``logp[t] = l[t, target[t]] - lse[t]`` and optionally the entropy ``lse - sum_v p_v l_v``.
    ``full_logprobs`` returns ``l - lse`` for every vocab entry (vLLM's ``compute_logits``).

Contract (the canonical vocab tiling)
    The vocab is cut into tiles of ``VOCAB_TILE`` entries from index 0 (the last tile may be
    short: equivalent to -inf padding). Per tile: logits by the linear contract (fp32,
    ``tree_sum`` with 8 K-groups, never rounded), tile max ``m`` (exact), ``s = tree_sum(exp(l-m))``
    and ``e = tree_sum(exp(l-m) * l)``. Tiles combine by an adjacent pairwise tree over the tile
    index (padded to a power of two with empty tiles):
    ``M = max(ma, mb); s = sa*exp(ma-M) + sb*exp(mb-M)`` (e likewise). Then
    ``lse = M + log(s)``, ``logp = l_target - lse``, ``entropy = lse - e / s``.
    Every number is a function of the row's own h and of W: batch-invariant. ``logp`` and
    ``full_logprobs[t, target]`` are the same subtraction of the same two fp32 numbers, so the
    training head and vLLM's log-probs agree bit for bit. The tile tree is the split a
    vocab-parallel head shards across ranks.

Memory: one [T, VOCAB_TILE] tile at a time; training never holds [T, V].

Backward (deterministic; tiles recomputed, in order)
    dl = g_logp * (onehot(target) - p) - g_ent * p * (l - e/s),  p = exp(l - lse);
    dh = sum over tiles (in tile order) of dl_tile @ W_tile;  dW_tile = dl_tile^T @ h.
"""

from __future__ import annotations

import torch

from .linear import LINEAR_K_GROUPS, linear_fwd
from .primitives import exp, log, matmul_nt, tree_sum

VOCAB_TILE = 256


def _tiles(vocab_size: int):
    return [(a, min(a + VOCAB_TILE, vocab_size)) for a in range(0, vocab_size, VOCAB_TILE)]


def _tile_stats(l: torch.Tensor, with_entropy: bool):
    m = l.amax(dim=-1)
    p = exp(l - m[:, None])
    s = tree_sum(p)
    e = tree_sum(p * l) if with_entropy else torch.zeros_like(s)
    return m, s, e


def _combine(m: torch.Tensor, s: torch.Tensor, e: torch.Tensor):
    """Adjacent pairwise tree over the tile dim (last) of per-tile stats [T, n_tiles]."""
    n = m.shape[-1]
    p = 1 << max(n - 1, 0).bit_length()
    if p != n:
        pad = p - n
        m = torch.cat([m, m.new_full((m.shape[0], pad), float("-inf"))], dim=-1)
        s = torch.cat([s, s.new_zeros(s.shape[0], pad)], dim=-1)
        e = torch.cat([e, e.new_zeros(e.shape[0], pad)], dim=-1)
    while m.shape[-1] > 1:
        ma, mb = m[:, 0::2], m[:, 1::2]
        mx = torch.maximum(ma, mb)
        fa = torch.where(ma == float("-inf"), torch.zeros_like(mx), exp(ma - mx))
        fb = torch.where(mb == float("-inf"), torch.zeros_like(mx), exp(mb - mx))
        s = s[:, 0::2] * fa + s[:, 1::2] * fb
        e = e[:, 0::2] * fa + e[:, 1::2] * fb
        m = mx
    return m[:, 0], s[:, 0], e[:, 0]


def _stats(h: torch.Tensor, w: torch.Tensor, vocab_size: int, targets: torch.Tensor | None,
           with_entropy: bool, keep_logits: bool = False):
    """One pass over the tiles: (lse, e/s, target logit or None, [tile logits] if kept)."""
    ms, ss, es, kept = [], [], [], []
    tgt = torch.zeros(h.shape[0], dtype=torch.float32, device=h.device) if targets is not None else None
    for a, b in _tiles(vocab_size):
        l = linear_fwd(h, w[a:b], None)
        m, s, e = _tile_stats(l, with_entropy)
        ms.append(m), ss.append(s), es.append(e)
        if targets is not None:
            inside = (targets >= a) & (targets < b)
            picked = l.gather(1, (targets - a).clamp(0, b - a - 1)[:, None])[:, 0]
            tgt = torch.where(inside, picked, tgt)
        if keep_logits:
            kept.append(l)
    M, S, E = _combine(torch.stack(ms, -1), torch.stack(ss, -1), torch.stack(es, -1))
    lse = M + log(S)
    return lse, E / S, tgt, kept


class _LogprobHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, targets, vocab_size, with_entropy):
        lse, mean_l, tgt, _ = _stats(h, w, vocab_size, targets, with_entropy)
        ctx.save_for_backward(h, w, targets, lse, mean_l)
        ctx.vocab_size = vocab_size
        ent = lse - mean_l if with_entropy else None
        return tgt - lse, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        h, w, targets, lse, mean_l = ctx.saved_tensors
        g_logp = torch.zeros_like(lse) if g_logp is None else g_logp.to(torch.float32)
        dh = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        dw = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if ctx.needs_input_grad[1] else None
        for a, b in _tiles(ctx.vocab_size):
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
        return dh.to(h.dtype), (dw.to(w.dtype) if dw is not None else None), None, None, None


def logprob_head(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab_size: int,
                 with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fp32 (log p(targets[t] | hidden[t]) [T], entropy [T] or None) without a [T, V] tensor."""
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"logprob_head: hidden {tuple(hidden.shape)} and targets "
                         f"{tuple(targets.shape)} must be [T, K] and [T]")
    if weight.shape[0] < vocab_size or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"logprob_head: weight {tuple(weight.shape)} must be [>= {vocab_size}, {hidden.shape[1]}]")
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= vocab_size):
        raise IndexError(f"logprob_head: targets must lie in [0, {vocab_size})")
    return _LogprobHead.apply(hidden, weight, targets.long(), vocab_size, with_entropy)


@torch.no_grad()
def full_logprobs(hidden: torch.Tensor, weight: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """fp32 [T, vocab_size] log-probs; entry [t, v] equals ``logprob_head`` with target v."""
    lse, _, _, tiles = _stats(hidden, weight, vocab_size, None, False, keep_logits=True)
    return torch.cat(tiles, dim=-1) - lse[:, None]
