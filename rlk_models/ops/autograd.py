"""Autograd glue shared by the backends: the ``torch.autograd.Function`` and the public wrapper
of ops whose forward is the same everywhere and whose backward is the backend's. A backend
passes its kernels in and exports what comes back, so argument checks, saved tensors and
gradient plumbing are written once."""

from __future__ import annotations

from typing import Callable

import torch

from .canonical import HeadStats, TileProbs, one_shard_stats
from .checks import check_embedding, check_head


def embedding_op(backward: Callable) -> Callable:
    """``embedding(ids, weight)``: forward is a gather (exact); ``backward(ids, grad,
    num_embeddings, dtype) -> dweight`` sums per id in ``canonical.embedding_order``."""

    class _Embedding(torch.autograd.Function):
        @staticmethod
        def forward(ctx, ids, weight):
            ctx.save_for_backward(ids)
            ctx.num, ctx.dtype = weight.shape[0], weight.dtype
            return weight[ids]

        @staticmethod
        def backward(ctx, grad):
            (ids,) = ctx.saved_tensors
            return None, backward(ids, grad, ctx.num, ctx.dtype)

    def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Rows of ``weight`` [V, D] for integer ``ids`` of any shape -> [*ids.shape, D]."""
        check_embedding(ids, weight)
        return _Embedding.apply(ids, weight)

    return embedding


def head_ops(shard_stats: Callable, combine_shards: Callable, backward: Callable,
             probs_backward: Callable | None = None):
    """``(logprob_head, full_logprobs, head_stats)`` of a backend from its ``shard_stats``,
    ``combine_shards`` and ``backward(h, w, targets, lse, mean_logit, vocab_size, g_logp, g_ent,
    need_dw) -> (dh, dw)``, which recomputes the logits. The forward is ``one_shard_stats`` (TP=1
    = one shard).

    ``probs_backward(h, w, targets, lse, target_logit, probs, vocab_size, g_logp, need_dw) -> (dh,
    dw)``, where a backend has one, is the backward from the probabilities the forward kept
    (``shard_stats(..., keep_probs=True)``, ``canonical.TileProbs``): no second logits matmul, for
    T x 256 ceil(V / 256) entries in h's dtype held from the forward to the backward. ``logprob_head``
    keeps them when asked (``save_probs``) and a gradient is recorded; a backward that also
    carries an entropy gradient recomputes (it needs the logits themselves, not only p)."""

    def head_stats(h, w, vocab_size, targets, with_entropy=False, keep_logits=False, keep_probs=False) -> HeadStats:
        return one_shard_stats(shard_stats, combine_shards, h, w, vocab_size, targets, with_entropy=with_entropy,
                               keep_logits=keep_logits, keep_probs=keep_probs)

    class _LogprobHead(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h, w, targets, vocab_size, with_entropy, save_probs):
            # save_probs: a gradient is recorded and the backend has probs_backward (the wrapper decided)
            st = head_stats(h, w, vocab_size, targets, with_entropy, keep_probs=save_probs)
            saved = (st.target, *st.probs) if save_probs else ()
            ctx.save_for_backward(h, w, targets, st.lse, st.mean_logit, *saved)
            ctx.vocab_size = vocab_size
            return st.target - st.lse, (st.lse - st.mean_logit if with_entropy else None)

        @staticmethod
        def backward(ctx, g_logp, g_ent):
            h, w, targets, lse, mean_l, *saved = ctx.saved_tensors
            g_logp = torch.zeros_like(lse) if g_logp is None else g_logp.to(torch.float32)
            need_dw = ctx.needs_input_grad[1]
            if saved and g_ent is None:
                target, q, m = saved
                dh, dw = probs_backward(h, w, targets, lse, target, TileProbs(q, m), ctx.vocab_size, g_logp, need_dw)
            else:
                dh, dw = backward(h, w, targets, lse, mean_l, ctx.vocab_size, g_logp, g_ent, need_dw)
            return dh, dw, None, None, None, None

    def logprob_head(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab_size: int,
                     with_entropy: bool = False, save_probs: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """fp32 (log p(targets[t] | hidden[t]) [T], entropy [T] or None) without a [T, V] logits
        tensor. ``save_probs`` (where the backend has a saved-probabilities backward): keep p in
        hidden's dtype for the backward instead of recomputing the logits there."""
        check_head(hidden, weight, targets, vocab_size)
        # grad mode is off inside Function.forward, and needs_input_grad ignores no_grad: decide here
        keep = (save_probs and probs_backward is not None and torch.is_grad_enabled()
                and (hidden.requires_grad or weight.requires_grad))
        return _LogprobHead.apply(hidden, weight, targets.long(), vocab_size, with_entropy, keep)

    @torch.no_grad()
    def full_logprobs(hidden: torch.Tensor, weight: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """fp32 [T, vocab_size] log-probs; entry [t, v] equals ``logprob_head`` with target v."""
        st = head_stats(hidden, weight, vocab_size, None, keep_logits=True)
        return st.logits.sub_(st.lse[:, None])  # the kept logits are a fresh buffer

    return logprob_head, full_logprobs, head_stats


def sum_op(forward: Callable) -> Callable:
    """``token_sum(x)``: a 0-dim fp32 sum of the 1-D fp32 ``x`` in the backend's fixed order
    (``forward(x)``); its gradient is the incoming gradient broadcast back (exact)."""

    class _Sum(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.n = x.shape[0]
            return forward(x)

        @staticmethod
        def backward(ctx, g):
            return g.expand(ctx.n).clone()

    def token_sum(x: torch.Tensor) -> torch.Tensor:
        """Sum of the 1-D float32 ``x`` (e.g. per-token losses) in a fixed order -> 0-dim fp32."""
        if x.dim() != 1 or x.dtype != torch.float32:
            raise ValueError(f"token_sum: x must be 1-D float32, got {tuple(x.shape)} {x.dtype}")
        return _Sum.apply(x)

    return token_sum
