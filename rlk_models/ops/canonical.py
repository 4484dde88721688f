"""What every op backend must agree on: the contract's constants and canonical layouts.

Both backends import this module and neither imports the other. It holds what decides how a
reduction is *cut* (so that tensor-parallel ranks and a TP=1 model cut it the same way), not how
a backend computes inside a piece:

- ``LINEAR_K_GROUPS``: a linear's K is cut into 8 contiguous groups, the unit a row-parallel
  rank of k (k | 8) owns;
- the log-prob head's canonical padded vocab: ``VOCAB_GROUPS`` groups of tiles of
  ``VOCAB_TILE`` entries, padded to a multiple of both (a function of the vocab size only),
  and each rank's contiguous slice of whole groups (``vocab_shard``);
- ``one_shard_stats``: TP=1 is one shard, reduced by the same two calls every TP size uses;
- ``embedding_runs`` / ``embedding_order``: the token order in which an embedding's backward sums a shared id.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

LINEAR_K_GROUPS = 8
VOCAB_TILE = 256
VOCAB_GROUPS = 8


def padded_vocab(vocab_size: int) -> int:
    """The canonical padded vocab: next multiple of VOCAB_GROUPS * VOCAB_TILE."""
    step = VOCAB_GROUPS * VOCAB_TILE
    return -(-vocab_size // step) * step


def vocab_shard(vocab_size: int, rank: int, tp_size: int) -> tuple[int, int]:
    """[start, end) of the padded vocab that rank ``rank`` of ``tp_size`` owns."""
    if VOCAB_GROUPS % tp_size:
        raise ValueError(f"tensor-parallel size {tp_size} must divide {VOCAB_GROUPS}")
    per = padded_vocab(vocab_size) // tp_size
    return rank * per, (rank + 1) * per


class TileProbs(NamedTuple):
    """What a forward keeps so that the backward need not recompute the logits: ``q`` [T, tiles x
    VOCAB_TILE] = exp(l - tile max) in h's dtype (0 past the vocab) and the tile maxima ``m`` [T,
    >= tiles] fp32 (tile j's in column j), so p = q exp(m - lse)."""
    q: torch.Tensor
    m: torch.Tensor


class Partials(NamedTuple):
    """A row-parallel product left unfolded for the next op (``linear_unfolded``, inference at TP=1): its fp32
    split-K partials ``parts`` [P, T, N] -- the 8 K-group partials or the 2 halves' sums, as ``combine_partials``
    takes one rank's -- the bias, the output dtype, and ``run``: how many partials the producer's own fold adds in
    order from zero before the runs' sums are added (the 8 groups in runs of a half, the 2 halves in runs of one).
    Its value is ``combine_partials(parts[None], bias, dtype)``, the linear's output bit for bit; the next residual
    add + RMSNorm folds them in the producer's runs (``add_rms_norm``), a launch and a round trip of the output
    fewer."""
    parts: torch.Tensor
    bias: torch.Tensor | None
    dtype: torch.dtype
    run: int


class ShardStats(NamedTuple):
    """One vocab shard's reduction (``shard_stats``), each [T] fp32: running max ``m``, sum of
    exp(l - m) ``s``, sum of exp(l - m) * l ``e``, the target's logit (exactly 0 where the target
    lies in another shard), if kept, the shard's real logits [T, entries] (else None) and, if
    kept (``keep_probs``: a backend's saved-probabilities backward), ``TileProbs``."""
    m: torch.Tensor
    s: torch.Tensor
    e: torch.Tensor
    target: torch.Tensor
    logits: torch.Tensor | None
    probs: TileProbs | None = None


class HeadStats(NamedTuple):
    """The finished tree (``combine_shards``) over all shards: log-sum-exp, mean logit under p
    (for the entropy), the target's logit [T], and the kept logits of a single shard."""
    lse: torch.Tensor
    mean_logit: torch.Tensor
    target: torch.Tensor
    logits: torch.Tensor | None = None
    probs: TileProbs | None = None


def one_shard_stats(shard_stats, combine_shards, h: torch.Tensor, w: torch.Tensor, vocab_size: int,
                    targets: torch.Tensor | None, *, with_entropy: bool, keep_logits: bool = False,
                    keep_probs: bool = False) -> HeadStats:
    """TP=1 is one shard: the same two calls as every TP size (pass the backend's ``shard_stats``
    and ``combine_shards``), so TP=k gives TP=1's bits. ``keep_probs`` is passed on only when set
    (a backend without a saved-probabilities backward never sees it)."""
    st = shard_stats(h, w, (0, padded_vocab(vocab_size)), vocab_size, targets, with_entropy=with_entropy,
                     keep_logits=keep_logits, **({"keep_probs": True} if keep_probs else {}))
    lse, mean_l, target = combine_shards(st.m[None], st.s[None], st.e[None], st.target[None])
    return HeadStats(lse, mean_l, target, st.logits, st.probs)


def embedding_runs(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(order, sorted ids, runs): token indices sorted stably by id, so the tokens sharing an id
    are adjacent and in token order; ``runs[i]`` is the number of tokens holding ``sorted[i]`` where
    position i starts that id's run, else 0. Every output has ``ids``' size and is computed without
    a host read (a CUDA graph can capture it): what the Triton backward's grid walks."""
    ids = ids.reshape(-1)
    sorted_ids, order = torch.sort(ids, stable=True)
    t = ids.numel()
    idx = torch.arange(t, device=ids.device)
    start = torch.ones(t, dtype=torch.bool, device=ids.device)
    start[1:] = sorted_ids[1:] != sorted_ids[:-1]
    # each position's next run start after it (t past the last): a suffix minimum of the starts' indices
    starts_after = torch.cat([torch.where(start, idx, t)[1:], idx.new_full((min(t, 1),), t)])
    end = starts_after.flip(0).cummin(0).values.flip(0)
    return order, sorted_ids, torch.where(start, end - idx, 0)


def embedding_order(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(order, distinct ids, counts, starts): ``embedding_runs``' order with its runs listed
    (a host read: the distinct ids' count); ``order[starts[u]:starts[u] + counts[u]]`` hold id
    ``uniq[u]``."""
    order, sorted_ids, runs = embedding_runs(ids)
    starts = torch.nonzero(runs)[:, 0]
    return order, sorted_ids[starts], runs[starts], starts
