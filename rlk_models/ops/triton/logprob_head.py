"""Fused log-prob head in Triton: lm_head matmul + per-tile log-sum-exp stats + target gather
(+ entropy), forward and backward, never materialising fp32 [T, V] logits; tensor-parallel by vocab
groups.

Contract
    The canonical vocab tiling of ``rlk_models.ops.canonical``: padded vocab =
    next multiple of 8 x 256, 8 contiguous groups of ``VOCAB_TILE`` = 256-entry tiles. The
    stats kernel computes, for a block of rows and one tile, the fp32 logits with one fp32
    accumulator walking K in tiles of ``BLOCK_K`` in order (``utils.dot_k_range`` over all of K:
    the head is vocab-parallel, K is never split, so it needs no K-groups and keeps one
    accumulator), the tile max ``m``, ``s = sum(exp(l - m))`` and ``e = sum(exp(l -
    m) * l)`` (``tl.sum`` over the 256-wide tile: a tree fixed by the tile width) and the target
    logit (written by the tile that holds the target). An all-padding tile is the empty tile
    (m = -inf, s = e = 0). Stats are combined by an adjacent pairwise tree
    (``M = max(ma, mb); s = sa exp(ma - M) + sb exp(mb - M)``, ``tl.exp``) over the tiles of each
    group, then over this shard's groups (``shard_stats``), then over the shards in rank order
    (``combine_shards``: ``lse = M + log(S)``). TP=1 is one shard: the same calls, the same
    bits for every TP size that divides 8. ``logp = l_target - lse``; ``full_logprobs`` keeps
    the same kernel's logits and subtracts the same ``lse``, so its entry at the target equals
    ``logp`` bitwise. Row-invariant: no number depends on other rows.

Backward from kept probabilities (training's default: ``logprob_head(..., save_probs=True)``)
    With a gradient recorded, the stats kernel also writes each tile's exp(l - m) in h's dtype
    (``TileProbs``: T x 256 ceil(V / 256) entries, 2 bytes each in bf16, held until the backward).
    The backward turns them into ``dl = g (onehot - p)``, ``p = q exp(m - lse)``, in place (one
    elementwise pass; the target entry from the fp32 target logit, so ``1 - p`` there is not
    rounded through q), then dh = dl @ W and dW = dl^T @ h, one matmul each over the whole vocab:
    dW's in the plain K order; dh's too above ``DH_SPLIT``'s rows, and below split-K -- the vocab
    in a fixed number of groups by T, one program per (tile, group), the fp32 partials folded in
    order (``mm``'s halves) -- since the plain order's 32-64 programs of [T, 4096] left most SMs
    idle. Against the recompute below it saves a [T, V, K] matmul and dh's fp32
    round trip per chunk; p carries one more rounding (q's: 2^-9 relative in bf16) before dl's
    own. An entropy gradient takes the recompute path (it needs l, not only p).

Backward with recompute (``save_probs=False``, or an entropy gradient; deterministic; vocab in
chunks, in order)
    One kernel recomputes a chunk's logits (the forward's K order) and writes
    ``dl = g (onehot - p) - g_ent p (l - e/s)``, ``p = exp(l - lse)``, in h's dtype; then
    dh += dl @ W_chunk (fp32, chunks in order) and dW_chunk = dl^T @ h by ``mm`` (plain K order).
    A chunk is ``bwd_chunk(T)`` vocab entries: ``BWD_CHUNK`` (2048) at T >= 2048, wider for fewer
    rows, so the [T, chunk] buffer stays under ``BWD_ELEMS`` entries (8 MiB). Peak extra memory is
    a few buffers (about 1/20 of fp32 [T, V] logits at V = 152k and T >= 1024); at small T the
    backward is a handful of launches (T = 128: 5 chunks) instead of 3 per 2048 entries (75
    chunks at V = 152k), which made it host-bound. The chunking sets dh's summation order, so dh
    depends on T (the contract does not ask a backward to be batch-invariant, only
    deterministic); dW does not (each chunk's rows reduce over T in the plain order).

Memory (forward): stats are 3 x T x ceil(V/256) fp32: 1/85 of fp32 [T, V] logits; the kept
probabilities (training) are half of fp32 [T, V] logits in bf16.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..autograd import head_ops
from ..canonical import VOCAB_GROUPS, VOCAB_TILE, HeadStats, ShardStats, TileProbs, padded_vocab
from . import head_sm90
from .matmul import HALF, Launch, mm
from .utils import BLOCK_K, bind_cuda_context, cdiv, dot_k_range, fit_stages, num_sms, tma_ok

BWD_CHUNK = 2048        # the narrowest backward vocab chunk (entries), and the unit of wider ones
BWD_ELEMS = 1 << 22     # [T, chunk] entries of one chunk's dlogits at most (8 MiB bf16): 2048 from T = 2048


def bwd_chunk(t: int, vocab_size: int) -> int:
    """The backward's vocab chunk for T rows: the largest multiple of ``BWD_CHUNK`` with
    T x chunk <= ``BWD_ELEMS`` (at least ``BWD_CHUNK``, at most the vocab rounded up to one)."""
    most = -(-vocab_size // BWD_CHUNK) * BWD_CHUNK
    return min(most, max(BWD_CHUNK, BWD_ELEMS // max(t, 1) // BWD_CHUNK * BWD_CHUNK))


# (BLOCK_M, num_warps) of the stats kernel by T. The tile's tl.sum tree follows the MMA layout;
# the H200 sweep found (64, 4) and (128, 8) (16 rows per warp) give the same bits at every T, and
# every config gives those bits for T <= 16, while (64, 8), (32, *), (16, *) differ at T >= 128.
# Only the proven ones are used (bf16); the sweep re-checks row 0 at every T. Other dtypes use
# one fixed config (fp32 dots are TF32 there; the self-test found the bf16 table does not carry over).
STATS_CONFIG = {64: (64, 4), 1 << 62: (128, 8)}
# K slots of the Triton stats kernel by its BLOCK_M (at most; ``fit_stages``; 3 for a BLOCK_M not listed). Slots never
# change the K order, hence the bits. 64-row tiles take 40 KB a slot, so one program an SM runs at 3-5 slots, and
# V = 151,936's 594 tiles are 4.5 waves on 132 SMs. H200, session 37 (head_sweep.py --graph-split, K = 4096, the
# graphed stats kernel, us at 1 / 16 rows): 3 slots 321 / 321, 4 slots 303 / 302, 5 slots 302 / 304, 2 (two
# programs an SM) 355 / 361; the cuBLAS matmul 295 / 301. At 4 slots the sm_90 builds spill what 3 did in every
# form (none; 8 bytes keeping the logits or probabilities, 104 with the entropy; ``rowwise_sass.stats_forms``). The
# 128-row tiles stay at 3: 4 there raises the logits-keeping (vLLM sampling) build's spill from 128 to 200 bytes
# (``test_sm90_build.py::test_head_stats_triton_builds_within_their_spills`` holds each form to its spill)
STATS_STAGES = {64: 4, 128: 3}
STATS_CONFIG_OTHER = (64, 8)
# rows from which the stats kernel loads h and W by TMA (the same bits as its pointer loads; below, the two
# descriptors' host time would weigh on the eager decode-sized head). Not while it keeps the probabilities:
# H200, session 19 (head_sweep, K = 4096): TMA loads 16.98 ms against pointers' 17.60 at M = 8192 (1.87 / 1.98
# at 1024), but with the probabilities kept 18.20 against 17.82 (the TMA build spills 288 bytes, 144 by pointers).
# Nor while it keeps the logits (the vLLM class's sampling head): that build spills 368 bytes by TMA, 8 by
# pointers, and the one 8B engine run with it there had its batch-256 decode step at 2.3x stock (not re-measured)
STATS_TMA_ROWS = 128
# Which kernel makes the stats from STATS_TMA_ROWS rows (bf16, sm_90, neither the logits kept nor the entropy's sum,
# whose build spills): ``head_sm90`` (Gluon, warp-specialized: TMA loads with the probabilities kept too) gives this
# kernel's (128, 8) launch's bits in every form (tests/gpu, natively). "auto" takes the form that measured fastest
# (``_sm90_config``). H200, session 30 (head_sweep.py --stats-kernels 256,2048,16384, V = 151,936; ms, Triton /
# grid form / ping-pong):
#   T = 256:   K = 4096 kept 0.54 / 0.51 / 0.67, not kept 0.50 / 0.48 / 0.64; K = 2048 0.35 / 0.32 / 0.36, 0.29 /
#              0.29 / 0.33 -- the grid form (ping-pong's persistent walk has too few tiles to hide its epilogue in)
#   T = 2048:  K = 4096 4.26 / 4.29 / 4.13, 4.08 / 3.67 / 3.61; K = 2048 2.34 / 2.12 / 1.92, 2.13 / 2.05 / 1.84 --
#              ping-pong
#   T = 16384: K = 4096 38.7 / 37.0 / 37.8, 35.4 / 35.5 / 36.1; K = 2048 21.8 / 21.4 / 19.3, 20.8 / 20.9 / 18.7 --
#              ping-pong below K = 4096; at 4096 the grid form kept, this kernel not (the shorter K, the larger
#              the epilogue's share, which ping-pong hides under the other warpgroup's dots)
# The row bounds between are not measured. "sm90" (``head_sm90.STATS_SM90_CONFIG``) / "triton" force one
STATS_KERNEL = "auto"
STATS_SM90_MIN_K = 4096
STATS_PINGPONG_ROWS = (1024, 8192)  # ping-pong from the first bound; from the second only below STATS_SM90_MIN_K
# (BLOCK_M, BLOCK_V, num_warps, num_stages) of the backward's dlogits kernel. The backward promises determinism,
# not invariance: any tile gives valid (deterministic) dlogits; benchmarks/triton/head_sweep.py times these.
DLOGITS_CONFIG = (128, 256, 8, 3)  # head_sweep at M = 8192 (H200, session 18): forward + backward 78.7 ms, against
#                                   82.3 ms for (128, 128, 8, 3) and 86.3 ms for session 2's (64, 128, 4, 3)
DLOGITS_CANDIDATES = [(64, 128, 4, 3), (128, 128, 8, 3), (128, 256, 8, 3), (128, 128, 4, 3), (64, 256, 8, 3)]


@triton.jit
def _head_stats_kernel(h, w, tgt_ptr, m_ptr, s_ptr, e_ptr, t_ptr, l_ptr, q, T, V, K, n_tiles, n_stats, start,
                       HAS_TGT: tl.constexpr, WITH_E: tl.constexpr, KEEP: tl.constexpr, KEEP_P: tl.constexpr,
                       HW_TMA: tl.constexpr,
                       Q_TMA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
                       NUM_PROGS: tl.constexpr):
    """Tiles of the V rows of w (a shard's real vocab); stats [T, n_stats] row-major. HW_TMA: h and
    w are TMA descriptors (the same K tiles in the same order, zero-filled past T and V, as the
    masked pointer loads give them: the same wgmma products, the same bits); HAS_TGT: targets
    (vocab ids, the shard's from ``start``) whose logits to write; KEEP_P:
    exp(l - tile max) into q [T, n_tiles x BLOCK_V] (h's dtype), by a TMA store of the tile when
    Q_TMA (``q`` is then its descriptor: an asynchronous copy out of shared memory instead of a
    register tile of addresses, which spilled), else through pointers."""
    num_pid_m = tl.cdiv(T, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    for tile in range(tl.program_id(0), num_pid_m * n_tiles, NUM_PROGS):
        pid_v = tile // num_pid_m  # neighbouring programs share a weight tile
        pid_m = tile % num_pid_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rv = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
        acc = tl.zeros((BLOCK_M, BLOCK_V), dtype=tl.float32)
        if HW_TMA:
            for k0 in range(0, K, BLOCK_K):  # K in order
                acc = tl.dot(h.load([pid_m * BLOCK_M, k0]), w.load([pid_v * BLOCK_V, k0]).T, acc)
        else:
            acc = dot_k_range(h, w, rm, rv, rk, T, V, K, 0, K, K, 1, K, 1, acc, BLOCK_K)  # K in order
        if KEEP:
            tl.store(l_ptr + rm[:, None].to(tl.int64) * V + rv[None, :], acc,
                     mask=(rm[:, None] < T) & (rv[None, :] < V))
        valid = rv[None, :] < V
        if (pid_v + 1) * BLOCK_V > V:  # the row's last vocab tile only: elsewhere every entry is < V (skipped)
            acc = tl.where(valid, acc, float("-inf"))
        mx = tl.max(acc, axis=1)
        if KEEP_P and HAS_TGT:  # the target's logit first: the logits are dead once p is made (registers for the store)
            _store_target_logit(t_ptr, tgt_ptr, acc, rm, rv, T, V, start, pid_v, BLOCK_V)
        p = tl.exp(acc - mx[:, None])
        out = rm * n_stats + pid_v
        tl.store(m_ptr + out, mx, mask=rm < T)
        tl.store(s_ptr + out, tl.sum(p, axis=1), mask=rm < T)
        if WITH_E:
            tl.store(e_ptr + out, tl.sum(p * tl.where(valid, acc, 0.0), axis=1), mask=rm < T)
        if KEEP_P:
            if Q_TMA:
                q.store([pid_m * BLOCK_M, pid_v * BLOCK_V], p.to(q.dtype))
            else:
                q_tile = q + (pid_m * BLOCK_M).to(tl.int64) * (n_tiles * BLOCK_V) + pid_v * BLOCK_V
                tl.store(q_tile + tl.arange(0, BLOCK_M)[:, None] * (n_tiles * BLOCK_V) + tl.arange(0, BLOCK_V)[None, :],
                         p.to(q.dtype.element_ty), mask=rm[:, None] < T)
        elif HAS_TGT:
            _store_target_logit(t_ptr, tgt_ptr, acc, rm, rv, T, V, start, pid_v, BLOCK_V)


@triton.jit
def _store_target_logit(t_ptr, tgt_ptr, acc, rm, rv, T, V, start, pid_v, BLOCK_V: tl.constexpr):
    """The target's logit, written by the tile that holds it (a target outside the shard's V entries from
    ``start``, or -1, in none); the select-sum runs only where one of the tile's rows has its target in it
    (~20% of 128-row tiles at V = 151,936: its values are discarded in the rest)."""
    tgt = tl.load(tgt_ptr + rm, mask=rm < T, other=-1).to(tl.int32) - start  # the shard's entry (ids fit int32)
    inside = (tgt >= pid_v * BLOCK_V) & (tgt < pid_v * BLOCK_V + BLOCK_V) & (tgt < V)
    if tl.max(inside.to(tl.int32), axis=0) > 0:
        hit = tl.sum(tl.where(rv[None, :] == tgt[:, None], acc, 0.0), axis=1)  # one nonzero term at most
        tl.store(t_ptr + rm, hit, mask=(rm < T) & inside)


@triton.jit
def _dlogits_kernel(h_ptr, w_ptr, tgt_ptr, lse_ptr, mean_ptr, g_ptr, ge_ptr, dl_ptr, T, C, K, v0,
                    WITH_E: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr):
    """dl [T, C] (h's dtype) for vocab entries v0 .. v0+C: logits recomputed in the forward's
    K order, ``dl = g (onehot - p) - g_ent p (l - mean)``, ``p = exp(l - lse)``."""
    pid_m, pid_v = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rv = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_V), dtype=tl.float32)
    acc = dot_k_range(h_ptr, w_ptr + v0 * K, rm, rv, rk, T, C, K, 0, K, K, 1, K, 1, acc, BLOCK_K)
    row_ok = rm < T
    lse = tl.load(lse_ptr + rm, mask=row_ok, other=0.0)
    g = tl.load(g_ptr + rm, mask=row_ok, other=0.0)
    tgt = tl.load(tgt_ptr + rm, mask=row_ok, other=-1) - v0
    p = tl.exp(acc - lse[:, None])
    dl = tl.where(rv[None, :] == tgt[:, None], g[:, None], 0.0) - g[:, None] * p
    if WITH_E:
        ge = tl.load(ge_ptr + rm, mask=row_ok, other=0.0)
        mean = tl.load(mean_ptr + rm, mask=row_ok, other=0.0)
        dl -= ge[:, None] * p * (acc - mean[:, None])
    tl.store(dl_ptr + rm.to(tl.int64)[:, None] * C + rv[None, :], dl.to(dl_ptr.dtype.element_ty),
             mask=row_ok[:, None] & (rv[None, :] < C))


@triton.jit
def _probs_dlogits_kernel(q_ptr, m_ptr, lse_ptr, g_ptr, tgt_ptr, tl_ptr, T, n_tiles, n_stats,
                          BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr):
    """dl = g (onehot - p) in place of the kept q (one vocab tile of BLOCK_M rows a program):
    p = q exp(m - lse) off the target; at the target, g - g exp(l_target - lse) from the fp32
    target logit (so 1 - p there does not inherit q's rounding)."""
    pid_m, tile = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rv = tile * BLOCK_V + tl.arange(0, BLOCK_V)
    ok = rm < T
    lse = tl.load(lse_ptr + rm, mask=ok, other=0.0)
    g = tl.load(g_ptr + rm, mask=ok, other=0.0)
    mt = tl.load(m_ptr + rm * n_stats + tile, mask=ok, other=0.0)
    tgt = tl.load(tgt_ptr + rm, mask=ok, other=-1)
    hit = g - g * tl.exp(tl.load(tl_ptr + rm, mask=ok, other=0.0) - lse)
    ptrs = q_ptr + rm[:, None].to(tl.int64) * (n_tiles * BLOCK_V) + rv[None, :]
    q = tl.load(ptrs, mask=ok[:, None], other=0.0).to(tl.float32)
    dl = tl.where(rv[None, :] == tgt[:, None], hit[:, None], -(g * tl.exp(mt - lse))[:, None] * q)
    tl.store(ptrs, dl.to(q_ptr.dtype.element_ty), mask=ok[:, None])


@triton.jit
def _pair(ma, mb, sa, sb, ea, eb):
    """Two (max, sum, entropy sum) stats -> their merge: the one operation of every tree (``_tree_kernel``,
    ``_shard_tree_kernel``), so TP=1's fused shard tree and TP=N's per-rank trees and combine round alike. The sums
    are written as ``fma(a, fa, b * fb)``: left as ``a * fa + b * fb``, the compiler contracted one product into
    an FMA, which one by the code around it (session 36 on the H200: the fused shard tree's sums differed from
    two ``_tree`` launches; with this form the sums of Qwen3's 594 tiles differ from the earlier trees' in ~9%
    of rows, by an ulp where printed, and every tree form agrees with every other)."""
    mx = tl.maximum(ma, mb)
    fa = tl.where(ma == float("-inf"), 0.0, tl.exp(ma - mx))
    fb = tl.where(mb == float("-inf"), 0.0, tl.exp(mb - mx))
    return mx, tl.fma(sa, fa, sb * fb), tl.fma(ea, fa, eb * fb)


@triton.jit
def _finish(m, s, e):
    """The finished tree's (lse, mean logit): ``_tree_kernel``'s FINAL over the ranks and the one-shard tree's."""
    return m + tl.log(s), e / s


@triton.jit
def _rows_tree(m, s, e, ROWS: tl.constexpr, LEVELS: tl.constexpr):
    """[ROWS, 2**LEVELS] stats -> [ROWS]: each row's adjacent pairwise tree (``_pair``), its last value taken by
    ``tl.sum`` over one element. The level loop of every tree kernel."""
    for lvl in tl.static_range(LEVELS):
        ma, mb = tl.split(tl.reshape(m, (ROWS, 1 << (LEVELS - 1 - lvl), 2)))
        sa, sb = tl.split(tl.reshape(s, (ROWS, 1 << (LEVELS - 1 - lvl), 2)))
        ea, eb = tl.split(tl.reshape(e, (ROWS, 1 << (LEVELS - 1 - lvl), 2)))
        m, s, e = _pair(ma, mb, sa, sb, ea, eb)
    return (tl.sum(tl.reshape(m, (ROWS, 1)), 1), tl.sum(tl.reshape(s, (ROWS, 1)), 1),
            tl.sum(tl.reshape(e, (ROWS, 1)), 1))


@triton.jit
def _store_root(m, s, e, row, mo_ptr, so_ptr, eo_ptr, FINAL: tl.constexpr):
    """A tree's root ([1] stats, ``_rows_tree`` of one row) into the row's outputs: (m, s, e), or FINAL (lse,
    mean logit) by ``_finish`` (so nothing into ``so_ptr``)."""
    m, s, e = tl.sum(m, 0), tl.sum(s, 0), tl.sum(e, 0)
    if FINAL:
        lse, mean = _finish(m, s, e)
        tl.store(mo_ptr + row, lse)
        tl.store(eo_ptr + row, mean)
    else:
        tl.store(mo_ptr + row, m)
        tl.store(so_ptr + row, s)
        tl.store(eo_ptr + row, e)


@triton.jit
def _tree_kernel(m_ptr, s_ptr, e_ptr, mo_ptr, so_ptr, eo_ptr, N, NP2: tl.constexpr, LEVELS: tl.constexpr,
                 FINAL: tl.constexpr):
    """One row of N stats (contiguous) -> its adjacent pairwise tree; FINAL: (M + log S, E / S)."""
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, NP2)
    ok = j < N
    m = tl.reshape(tl.load(m_ptr + row * N + j, mask=ok, other=float("-inf")), (1, NP2))
    s = tl.reshape(tl.load(s_ptr + row * N + j, mask=ok, other=0.0), (1, NP2))
    e = tl.reshape(tl.load(e_ptr + row * N + j, mask=ok, other=0.0), (1, NP2))
    m, s, e = _rows_tree(m, s, e, 1, LEVELS)
    _store_root(m, s, e, row, mo_ptr, so_ptr, eo_ptr, FINAL)


def _tree(m: torch.Tensor, s: torch.Tensor, e: torch.Tensor, final: bool = False):
    """Adjacent pairwise tree over the last dim of [..., N] stats -> [...] (FINAL: lse, e/s)."""
    n = m.shape[-1]
    shape = m.shape[:-1]
    m, s, e = (x.reshape(-1, n).contiguous() for x in (m, s, e))
    mo, so, eo = (torch.empty(m.shape[0], dtype=torch.float32, device=m.device) for _ in range(3))
    if m.shape[0]:
        levels = max(n - 1, 0).bit_length()
        _tree_kernel[(m.shape[0],)](m, s, e, mo, so, eo, n, NP2=1 << levels, LEVELS=levels, FINAL=final)
    return mo.view(shape), so.view(shape), eo.view(shape)


@triton.jit
def _shard_tree_kernel(m_ptr, s_ptr, e_ptr, tl_ptr, tgt_ptr, mo_ptr, so_ptr, eo_ptr, to_ptr, G, TPG, n_real, start, V,
                       GP2: tl.constexpr, LEVELS_G: tl.constexpr, NP2: tl.constexpr, LEVELS: tl.constexpr,
                       WITH_E: tl.constexpr, HAS_TGT: tl.constexpr, FINAL: tl.constexpr):
    """One row's G x TPG tile stats (contiguous, a group's tiles adjacent) -> the shard's (m, s, e): each group's
    adjacent pairwise tree, then the groups' -- ``_tree_kernel``'s two launches (``_tree`` of the [G, TPG] view,
    then of its [G] result) in one, with their operations in their order: the same padding (-inf, 0, 0) past
    TPG and G, the same pairs (``_pair``), a tree's last value taken by ``tl.sum`` over one element as there.

    The slots past the ``n_real`` tiles the stats kernel wrote, and e without WITH_E, are read as that padding,
    so the stats buffers need no fill. The target's logit: the stats kernel's where the row's target (a vocab id,
    the shard's from ``start``, V entries) lies in the shard, else exactly 0 (HAS_TGT false: 0). FINAL (TP=1, the
    one shard): (lse, mean logit) by ``_finish`` as ``combine_shards``'s tree gives them over one rank, and the
    target's logit +0.0 for -0.0, as its sum over the ranks gives it."""
    row = tl.program_id(0).to(tl.int64)
    g = tl.arange(0, GP2)[:, None]
    j = tl.arange(0, NP2)[None, :]
    ok = (g < G) & (j < TPG) & (g * TPG + j < n_real)
    at = row * G * TPG + g * TPG + j
    m = tl.load(m_ptr + at, mask=ok, other=float("-inf"))
    s = tl.load(s_ptr + at, mask=ok, other=0.0)
    if WITH_E:
        e = tl.load(e_ptr + at, mask=ok, other=0.0)
    else:
        e = tl.zeros((GP2, NP2), dtype=tl.float32)
    m, s, e = _rows_tree(m, s, e, GP2, LEVELS)  # each group's tiles
    real = tl.arange(0, GP2) < G  # the groups past G: the padding _tree_kernel loads there
    m = tl.reshape(tl.where(real, m, float("-inf")), (1, GP2))
    s = tl.reshape(tl.where(real, s, 0.0), (1, GP2))
    e = tl.reshape(tl.where(real, e, 0.0), (1, GP2))
    m, s, e = _rows_tree(m, s, e, 1, LEVELS_G)  # the shard's groups
    _store_root(m, s, e, row, mo_ptr, so_ptr, eo_ptr, FINAL)  # FINAL: _tree_kernel's over one rank
    target = 0.0
    if HAS_TGT:
        local = tl.load(tgt_ptr + row).to(tl.int32) - start  # vocab ids fit int32
        inside = (local >= 0) & (local < V)
        target = tl.where(inside, tl.load(tl_ptr + row, mask=inside, other=0.0), 0.0)
        if FINAL:
            target = tl.where(target == 0.0, 0.0, target)
    tl.store(to_ptr + row, target)


def _shard_tree(m: torch.Tensor, s: torch.Tensor, e: torch.Tensor | None, n_groups: int, tpg: int,
                n_real: int | None = None, targets: torch.Tensor | None = None, t_logit: torch.Tensor | None = None,
                start: int = 0, v: int = 0, final: bool = False):
    """[T, n_groups x tpg] tile stats (contiguous; the first ``n_real`` slots written, default all; e None: none)
    -> the shard's [T] (m, s, e, target logit): ``_tree`` over each group's tiles, then over the groups, in one
    launch (``_shard_tree_kernel``); ``targets``: the vocab ids whose logits ``t_logit`` holds where they lie in
    [start, start + v). ``final``: (lse, None, mean logit, target logit), the one shard's finished tree."""
    t = m.shape[0]
    mo, so, eo, to = (torch.empty(t, dtype=torch.float32, device=m.device) for _ in range(4))
    if t:
        levels, levels_g = max(tpg - 1, 0).bit_length(), max(n_groups - 1, 0).bit_length()
        _shard_tree_kernel[(t,)](m, s, m if e is None else e, m if t_logit is None else t_logit,
                                 m if targets is None else targets, mo, so, eo, to, n_groups, tpg,
                                 n_groups * tpg if n_real is None else n_real, start, v, GP2=1 << levels_g,
                                 LEVELS_G=levels_g, NP2=1 << levels, LEVELS=levels, WITH_E=e is not None,
                                 HAS_TGT=targets is not None, FINAL=final)
    return mo, None if final else so, eo, to


def _sm90_config(t: int, k: int, keep_probs: bool) -> tuple | None:
    """The ``head_sm90`` config that makes the stats of T rows by ``STATS_KERNEL`` (None: this module's
    kernel)."""
    if STATS_KERNEL == "sm90":
        return head_sm90.STATS_SM90_CONFIG
    if STATS_KERNEL != "auto":
        return None
    low, high = STATS_PINGPONG_ROWS
    if low <= t and (t < high or k < STATS_SM90_MIN_K):
        return head_sm90.STATS_PINGPONG_CONFIG
    return head_sm90.STATS_SM90_CONFIG if keep_probs or t < high else None


def _launch_stats(h, w_real, targets, with_entropy, keep_logits, n_stats, keep_probs=False, start=0, filled=True,
                  logits_out=None):
    """The per-tile stats of h against w_real (a shard's real vocab rows), [T, n_stats] each, the target
    logits of ``targets`` (vocab ids; the shard's are start .. start + V - 1, others and -1 write none),
    the kept logits or probabilities. ``filled``: what no kernel writes holds the empty tile (-inf, 0, 0) and
    a target logit of 0 (the slots past the real tiles, e without entropy, rows whose target lies elsewhere);
    False leaves it unwritten, for ``_shard_tree``, which reads none of it (four fills fewer). ``logits_out``: the
    kept logits' buffer ([T, V] fp32, checked by the caller), else a fresh one."""
    t, k = h.shape
    v = w_real.shape[0]
    dev = h.device
    if filled:
        m = torch.full((t, n_stats), float("-inf"), dtype=torch.float32, device=dev)
        s = torch.zeros(t, n_stats, dtype=torch.float32, device=dev)
        e = torch.zeros_like(s)
        tgt = torch.zeros(t, dtype=torch.float32, device=dev)
    else:
        m, s = (torch.empty(t, n_stats, dtype=torch.float32, device=dev) for _ in range(2))
        e = torch.empty_like(s) if with_entropy else s  # without entropy never written nor read
        tgt = torch.empty(t, dtype=torch.float32, device=dev)
    logits = (m if not keep_logits else logits_out if logits_out is not None
              else torch.empty(t, v, dtype=torch.float32, device=dev))
    n_tiles = cdiv(v, VOCAB_TILE)
    q = torch.empty(t, n_tiles * VOCAB_TILE, dtype=h.dtype, device=dev) if keep_probs else None
    elem = h.element_size()
    if t and n_tiles:
        block_m, warps = (next(c for bound, c in STATS_CONFIG.items() if t <= bound) if h.dtype == torch.bfloat16
                          else STATS_CONFIG_OTHER)
        stride = 4 * num_sms(dev)  # the loop's constexpr stride: fixed, not the grid (a kernel per row count)
        progs = min(cdiv(t, block_m) * n_tiles, stride)
        tg = targets.contiguous() if targets is not None else tgt  # without targets: never read
        h, w_real = h.contiguous(), w_real.contiguous()
        sm90 = _sm90_config(t, k, keep_probs)
        if (sm90 and t >= STATS_TMA_ROWS and not (keep_logits or with_entropy) and head_sm90.usable(h)
                and tma_ok(h, w_real, *([q] if keep_probs else []))):
            bind_cuda_context(dev)
            head_sm90.launch(h, w_real, q, tg, m, s, e, tgt, n_tiles, n_stats, with_entropy, VOCAB_TILE, BLOCK_K,
                             sm90, start=start, has_targets=targets is not None)
            return m, s, e, tgt, logits, q
        hw_tma = t >= STATS_TMA_ROWS and not (keep_probs or keep_logits) and tma_ok(h, w_real)
        q_tma = keep_probs and tma_ok(q)
        if hw_tma or q_tma:
            from triton.tools.tensor_descriptor import TensorDescriptor

            bind_cuda_context(dev)
        if hw_tma:
            h, w_real = (TensorDescriptor.from_tensor(x, [rows, BLOCK_K]) for x, rows in ((h, block_m),
                                                                                           (w_real, VOCAB_TILE)))
        q_arg = TensorDescriptor.from_tensor(q, [block_m, VOCAB_TILE]) if q_tma else q if keep_probs else m
        staging = block_m * VOCAB_TILE * q.element_size() if q_tma else 0  # the TMA store's tile in shared memory
        _head_stats_kernel[(progs,)](h, w_real, tg, m, s, e, tgt, logits, q_arg, t, v, k,
                                     n_tiles, n_stats, start, HAS_TGT=targets is not None, WITH_E=with_entropy,
                                     KEEP=keep_logits, KEEP_P=keep_probs,
                                     HW_TMA=hw_tma, Q_TMA=q_tma, BLOCK_M=block_m, BLOCK_V=VOCAB_TILE, BLOCK_K=BLOCK_K,
                                     NUM_PROGS=stride, num_warps=warps,
                                     num_stages=fit_stages(block_m + VOCAB_TILE, elem,
                                                           STATS_STAGES.get(block_m, 3), staging))
    return m, s, e, tgt, logits, q


def _shard(h, w_shard, shard, vocab_size, targets, with_entropy, keep_logits, keep_probs, final, logits_out=None):
    """A vocab shard's stats kernel and tree (``shard_stats``; ``final``: the one shard's finished tree)."""
    start, end = shard
    pv = padded_vocab(vocab_size)
    n_groups = (end - start) * VOCAB_GROUPS // pv
    tpg = pv // VOCAB_GROUPS // VOCAB_TILE
    real = max(0, min(end, vocab_size) - start)
    m_tiles, s, e, t_logit, logits, q = _launch_stats(h, w_shard[:real], targets, with_entropy, keep_logits,
                                                      n_groups * tpg, keep_probs, start, filled=False,
                                                      logits_out=logits_out)
    # the tiles of each group, then this shard's groups
    out = _shard_tree(m_tiles, s, e if with_entropy else None, n_groups, tpg, cdiv(real, VOCAB_TILE),
                      targets, t_logit, start, real, final)
    return out, (logits if keep_logits else None), (TileProbs(q, m_tiles) if keep_probs else None)


def shard_stats(h: torch.Tensor, w_shard: torch.Tensor, shard: tuple[int, int], vocab_size: int,
                targets: torch.Tensor | None, *, with_entropy: bool, keep_logits: bool = False,
                keep_probs: bool = False) -> ShardStats:
    """Stats of one vocab shard ``[start, end)`` (rows of ``w_shard``), its tiles and groups
    combined (``canonical.ShardStats``); ``keep_probs``: also the tiles' exp(l - tile max)
    (``canonical.TileProbs``, for ``_probs_backward``)."""
    (m, s, e, target), logits, probs = _shard(h, w_shard, shard, vocab_size, targets, with_entropy, keep_logits,
                                              keep_probs, False)
    return ShardStats(m, s, e, target, logits, probs)


def one_shard_stats(h: torch.Tensor, w: torch.Tensor, vocab_size: int, targets: torch.Tensor | None, *,
                    with_entropy: bool, keep_logits: bool = False, keep_probs: bool = False,
                    logits_out: torch.Tensor | None = None) -> HeadStats:
    """TP=1's ``canonical.HeadStats``: the whole padded vocab as one shard with ``combine_shards``'s finish in
    the tree's launch (``_finish``, the target's +0.0 for -0.0 as its sum over ranks gives), so two launches
    where ``canonical.one_shard_stats`` takes four and a sum; TP=k's bits (tests: the vocab shards against TP=1).
    ``logits_out``: the kept logits written there ([T, vocab_size] fp32; ``full_logprobs(out=)``)."""
    (lse, _, mean_l, target), logits, probs = _shard(h, w, (0, padded_vocab(vocab_size)), vocab_size, targets,
                                                     with_entropy, keep_logits, keep_probs, True, logits_out)
    return HeadStats(lse, mean_l, target, logits, probs)


def combine_shards(m: torch.Tensor, s: torch.Tensor, e: torch.Tensor, tgt: torch.Tensor):
    """Finish the canonical tree over per-rank stats stacked in rank order ([k, T] each):
    (lse, e/s, target logit) [T]."""
    lse, _, mean_l = _tree(m.t(), s.t(), e.t(), final=True)
    return lse, mean_l, tgt.sum(0)  # one rank holds the target logit, the others exact zeros


def _dw_buffer(w: torch.Tensor, vocab_size: int, t: int) -> torch.Tensor:
    """dW's buffer for a backward whose products write rows [0, vocab_size) when there are rows: the rows past
    the vocab (a padded head's) zero, the others left for the products; all zero at T = 0, where the backward
    launches no dW product. Not a fill of the whole [V, K] buffer that the products then overwrite: at Qwen3's
    151,936 x 4096 that is 1.24 GB written for nothing (~0.26 ms on an H200, a tenth of the backward at 128 rows;
    not yet measured there)."""
    if t == 0:
        return torch.zeros_like(w)
    dw = torch.empty_like(w)
    if w.shape[0] > vocab_size:
        dw[vocab_size:].zero_()
    return dw


def _backward(h, w, targets, lse, mean_l, vocab_size, g_logp, g_ent, need_dw):
    """(dh, dw): vocab chunks in order; a dlogits kernel, then two plain-order matmuls."""
    with_e = g_ent is not None
    h = h.contiguous()
    dh = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
    dw = _dw_buffer(w, vocab_size, h.shape[0]) if need_dw else None
    # without entropy the kernel never reads g_ent; g_logp stands in as its pointer
    g_logp = g_logp.contiguous()
    g_ent = g_ent.to(torch.float32).contiguous() if g_ent is not None else g_logp
    t, k = h.shape
    chunk = bwd_chunk(t, vocab_size)
    dl = torch.empty(t, chunk, dtype=h.dtype, device=h.device)
    bm, bv, warps, stages = DLOGITS_CONFIG
    for a in range(0, vocab_size, chunk):
        b = min(a + chunk, vocab_size)
        c = b - a
        dlc = dl[:, :c] if c == chunk else torch.empty(t, c, dtype=h.dtype, device=h.device)
        if t:
            _dlogits_kernel[(cdiv(t, bm), cdiv(c, bv))](
                h, w, targets, lse, mean_l, g_logp, g_ent, dlc, t, c, k, a, WITH_E=with_e,
                BLOCK_M=bm, BLOCK_V=bv, BLOCK_K=BLOCK_K, num_warps=warps,
                num_stages=fit_stages(bm + bv, h.element_size(), stages))
        mm(dlc, w[a:b], b_kn=True, groups=1, out=dh, accumulate=True)  # dh + the chunk's product, in place
        if dw is not None and t:  # no rows: dW stays _dw_buffer's zeros
            mm(dlc, h, a_km=True, b_kn=True, groups=1, out=dw[a:b])
    return dh.to(h.dtype), dw


PROBS_BLOCK_M = 32  # rows a program of _probs_dlogits_kernel (one 256-entry vocab tile wide)
# dh = dl @ W's K-groups (vocab split-K; ``mm``'s ragged groups) and launch by T (row bound: (groups, Launch)); above
# the last bound one group (the plain K order, ``mm``'s table). Fixed by T, so dh is deterministic; its bits move
# with T's bucket, which a backward may (CONTRACT.md). H200, session 38 (head_sweep.py --backward-split, K = 4096,
# V = 151,936, graphed, us): 128 rows plain 508, these 4 groups 336 (cuBLAS 361); 256 rows plain 729, 8 groups by
# halves 550 (cuBLAS 550); 512 rows plain 962, 2 groups 1105: plain from there
DH_SPLIT = ((128, (4, Launch((128, 128, 8, 4), split=1))), (256, (8, Launch((128, 128, 8, 4), split=HALF))))


def _probs_backward(h, w, targets, lse, target_logit, probs: TileProbs, vocab_size, g_logp, need_dw):
    """(dh, dw) from the forward's kept probabilities: dl in place of q (one elementwise pass), then
    dh = dl @ W (split-K by ``DH_SPLIT`` at small T) and dW = dl^T @ h (plain K order), one matmul each over the
    whole vocab (fp32 accumulation; no logits recomputed, no vocab chunks)."""
    h = h.contiguous()
    t, k = h.shape
    q, m = probs
    n_tiles = q.shape[1] // VOCAB_TILE
    if t:
        _probs_dlogits_kernel[(cdiv(t, PROBS_BLOCK_M), n_tiles)](
            q, m, lse, g_logp.contiguous(), targets, target_logit, t, n_tiles, m.shape[1],
            BLOCK_M=PROBS_BLOCK_M, BLOCK_V=VOCAB_TILE, num_warps=4)
    dl = q[:, :vocab_size]
    groups, launch = next((gl for bound, gl in DH_SPLIT if t <= bound), (1, None))
    # written in h's dtype: the product's (or the fold's) one rounding of the fp32 sum, as a .to() of it would be
    dh = mm(dl, w[:vocab_size], b_kn=True, groups=groups, launch=launch, out=torch.empty_like(h))
    dw = None
    if need_dw:
        dw = _dw_buffer(w, vocab_size, t)
        if t:  # no rows: dW stays _dw_buffer's zeros
            mm(dl, h, a_km=True, b_kn=True, groups=1, out=dw[:vocab_size])
    return dh, dw


logprob_head, full_logprobs, head_stats = head_ops(shard_stats, combine_shards, _backward, _probs_backward,
                                                   one_shard_stats)


@torch.no_grad()
def logprob_head_forward(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab_size: int):
    """Forward only (benchmarks): fp32 log p(targets) [T]."""
    st = head_stats(hidden, weight, vocab_size, targets.long())
    return st.target - st.lse


__all__ = ["bwd_chunk", "combine_shards", "full_logprobs", "head_stats", "logprob_head", "logprob_head_forward",
           "shard_stats"]
