"""Causal GQA attention in Triton: packed variable-length training (forward + deterministic
backward) and vLLM's paged KV cache (decode and chunked prefill in one launch), bitwise
equal per token.

What it computes
    For query token i of a sequence, over its visible keys j <= pos(i):
    ``o_i = sum_j p_ij v_j / sum_j p_ij``, ``p_ij = 2^(s_ij - m_i)``,
    ``s_ij = (scale * log2 e) * (q_i . k_j)``. Query head h reads KV head h // (Hq / Hkv).

Contract (one row function, ``_tile_update``, shared by both kernels; ``_tile_update_t`` is
the same per element with the operands swapped)
    Keys are walked in tiles of ``BLOCK_N`` = 64 positions *of the sequence* (tile j holds
    positions 64j .. 64j+63, wherever they are stored), in increasing order, starting at
    position 0. Per tile: ``s = tl.dot(q, k^T) * qk_scale``, masked to -inf past the row's
    position; online softmax ``m' = max(m, rowmax s)``, ``alpha = 2^(m - m')``,
    ``p = 2^(s - m')`` rounded to the input dtype, ``l = tl.dot(p, 1, l * alpha)``,
    ``acc = tl.dot(p, v, acc * alpha)``. Finally ``o = acc / l``, rounded once. The row sum is a
    dot, not ``tl.sum``: a reduction's order follows the register layout, which differs between
    rows on M and rows on N, while a wgmma sums each element's products in key order either way.
    A tile past a row's position is an exact no-op for that row (alpha = 1, p = 0), so how far a
    kernel walks (to the end of the query block or of the sequence) never changes a row's bits;
    keys that are not stored (past the context) load as exact zeros. No split-KV.

    The training kernel puts BLOCK_M consecutive tokens of one head on the rows; the paged
    kernel puts (token, head-of-the-KV-group) pairs on the rows, or, for a request of <= 16 such
    rows (a decode), on the dots' N side (``_paged_rows_n``: wgmma's M side is at least 64, so
    rows on M would be 94% padding at GROUP 4). Rows of one ``tl.dot`` never mix, and the H200
    tests (``tests/gpu/test_triton_contract_8b.py``) check that the row composition, the side
    and BLOCK_M do not change a row's bits: they do not for BLOCK_M >= 64 (wgmma), they do for
    16 and 32 (another MMA instruction) -- so paged BLOCK_M is at least 64.

Backward (deterministic, no atomics): ``delta = rowsum(o * do)``; one kernel per KV tile and KV
head walks the group's query heads in order and their query tiles in order (dK, dV) and stores
each tile's dS, rounded as its dK dot reads it; another per query tile and head walks the key
tiles in order, dQ += dS @ K -- one dot a tile from the kept dS. Where dS would take more than
``DS_BYTES``, dQ's kernel recomputes it from q, k, v and dO instead (three dots a tile): the same
dS, the same dots in the same order, so the same bits (tests). fp32 accumulation, one rounding.

Loads: on the GPU the training kernels read q, k, v and dO by TMA (2-D descriptors over the
packed batch, ``_rows_tile``), else by masked pointer loads; the same bits either way (tests).

On Hopper (sm_90) the training forward is by default ``attention_sm90``'s Gluon kernel: the same
dots and row arithmetic as ``_varlen_fwd``, warp-specialized (a TMA loader warp, two consumer
warpgroups, each tile's softmax under the previous tile's P V dot), so the same bits (tests/gpu)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..autograd import column_slot, run_forward, shared_column_buffer
from ..checks import check_attention, check_paged_attention, read_cu_seqlens
from . import attention_sm90
from .utils import bind_cuda_context, cdiv, next_power_of_2, tma_ok

BLOCK_N = 64                # the KV tile: part of the contract
# Launch choices: (BLOCK_M, num_warps, num_stages) for training, (BLOCK_M, num_warps, num_stages,
# swap_stages) for paged (swap_stages: the pipeline depth of the key loop of a request of <= SWAP_N
# rows, ``_paged_rows_n``). On the H200 every BLOCK_M >= 64 gives the same bits in both kernels
# (Hopper wgmma), and so does the paged kernel's swapped form (rows on the N side: wgmma
# m64n16k16, or m64n8k16 at 8 warps); BLOCK_M 16/32 (mma.sync) gives different bits, so it is never
# used (tests/gpu checks each candidate). Training: BLOCK_M consecutive tokens of one head; paged:
# BLOCK_M (token, group head) pairs.
TRAIN_CONFIG = (128, 8, 3)
# The training forward where ``attention_sm90.usable``: its Gluon kernel (the softmax under the previous tile's P V
# dot), bitwise ``_varlen_fwd`` (tests/gpu); "triton" keeps ``_varlen_fwd`` everywhere
FWD_KERNEL = "sm90"
PAGED_CONFIG = (64, 4, 3, 5)
# Backward: (BLOCK_M query rows, BLOCK_N keys, num_warps, num_stages) of the dK/dV kernel and of the dQ kernel. A
# backward promises determinism, not invariance, so its tiles are free: a candidate changes dK/dV/dQ's bits (never
# the forward's), and each is checked run to run and against float64 (tests/ops/triton, attention_sweep.py --train).
BWD_CONFIG = ((64, 64, 4, 2), (128, 64, 4, 3))
# Below D = 128 dQ from the kept dS takes 64 query rows a tile: at D = 64 the 128-row build gave other dQ bits run to
# run on the H200 (session 28, attention_ds_check.py --varlen: packed lengths 1..2047, 16/2 heads, no NaN read from
# the NaN-filled dS, so a race, not an unwritten element; 8/8 heads in tests/gpu too), while every 64-row dQ
# candidate held in three NaN-filled runs. At D = 128 the 128-row dQ has held in every session since 23.
BWD_CONFIG_SMALL_D = ((64, 64, 4, 2), (64, 64, 4, 2))
# dQ when it recomputes dS (past DS_BYTES): the same dots as from the kept dS (key tiles of 64, rows on wgmma's M
# side), so the same bits
DQ_RECOMPUTE_CONFIG = (64, 64, 4, 2)
# For sm_90 (``attention_sass.py --backward``) the dK/dV default, storing dS by TMA, builds 255 registers, spills 64
# bytes and takes 115 KB of shared memory (2 programs an SM); dQ from kept dS 226 registers, 98 KB, none spilled.
# (Session 23 dropped dK/dV (64, 128, 8, 2) and (64, 64, 8, 2): 2.95-3.28x and 1.84-1.92x cuDNN's forward + backward
# at the 1.7B and 8B shapes, against the default's 1.23-1.28x.)
BWD_CANDIDATES = [BWD_CONFIG, ((64, 64, 4, 2), (64, 64, 4, 2)), ((64, 64, 4, 3), (64, 64, 4, 3)),
                  ((128, 64, 8, 2), (64, 64, 8, 2)), ((64, 64, 4, 2), (64, 64, 4, 4))]
# The tuning spaces the H200 sweep times (BLOCK_M >= 64 only); tests/gpu proves each gives the bits above, by
# TMA and by pointer loads. What Triton 3.6 builds for sm_90 (shared memory; programs an SM, at most 113 KB each
# for two): training (64, 4, 2) 82 KB, 2; (64, 4, 3) 114 KB, 1 (the row-sum operand's 2 KB put it over);
# (128, 8, 3) 130 KB, 1. TMA loads (``_rows_tile``) cut the forward's registers from 190-203 to 151-155 and its
# instructions by a quarter; on the H200 (session 21, attention_sweep.py --train) the forward at 8 x 2048 tokens,
# 16/8 heads: (64, 4, 2) 0.480 -> 0.387 ms, (128, 8, 3) 0.499 -> 0.376 (8 x 4096, 32/8: 2.78 and 2.51 ms).
TRAIN_CANDIDATES = [(64, 4, 2), (64, 4, 3), (128, 8, 2), (128, 8, 3), (64, 4, 4), (64, 8, 3)]
# Paged, BLOCK_M 64: num_stages 2-4 with swap_stages 3-4 84 KB; swap_stages 5-6 105 KB (three K/V buffers, one
# tile loading while one is used: with two the next tile's load is issued only after this one's dots) -- 2
# programs an SM, 180-188 registers at 4 warps, 127 at 8; swap_stages 7 137 KB, 1.
PAGED_CANDIDATES = [(64, 4, 3, 5), (64, 4, 2, 5), (64, 4, 4, 5), (64, 4, 3, 3), (64, 4, 3, 6), (64, 8, 3, 5),
                    (64, 8, 2, 5), (64, 4, 3, 7), (128, 8, 2, 5)]
# The backward keeps the scores' gradient dS (input dtype, a [T + sequences x pad, max_len] plane a query head) when
# all heads' fit in this many bytes: written by the dK/dV kernel and read by dQ's, which then needs one dot a tile
# instead of three (H200, session 23: attention forward + backward 1.11x cuDNN's time, from 1.24x, at 8 x 2048 tokens
# with the 1.7B and the 8B heads). 8 x 2048 tokens at 32 query heads need 2.2 GB; past the cap, dQ recomputes dS.
DS_BYTES = 4 << 30
LOG2E = 1.4426950408889634
SWAP_N = 16                 # paged: a request of <= 16 (token, group head) rows runs them on the dots' N side


@triton.jit
def _tile_update(q, k, v, m_i, l_acc, acc, visible, qk_scale, ones):
    """One key tile, rows on M: q [M, D], k/v [BLOCK_N, D], l_acc [M, 16] (16 equal columns)."""
    s = tl.dot(q, tl.trans(k)) * qk_scale
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None]).to(v.dtype)
    l_acc = tl.dot(p, ones, l_acc * alpha[:, None])
    acc = tl.dot(p, v, acc * alpha[:, None])
    return m_new, l_acc, acc


@triton.jit
def _tile_update_t(k, q_t, v, m_i, l_acc, acc, visible, qk_scale, ones):
    """``_tile_update`` with the operands swapped, rows on N (for a tile of <= 16 rows): q_t
    [D, N], k/v [BLOCK_N, D], l_acc [64, N] (64 equal rows), acc [D, N]. Every element is the
    same dot of the same products in the same key order, so the same bits."""
    s = tl.dot(k, q_t) * qk_scale
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 0))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[None, :]).to(v.dtype)
    l_acc = tl.dot(ones, p, l_acc * alpha[None, :])
    acc = tl.dot(tl.trans(v), p, acc * alpha[None, :])
    return m_new, l_acc, acc


@triton.jit
def _query_block(cu_ptr, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr):
    """This program's block of query rows (grid: row block counted from the last, sequence, head)
    of a packed batch: the sequence's start and length, the head and its KV head, the first row,
    row and feature offsets. A causal block's work grows with its index, so a head's longest
    programs start first and its short ones fill the tail; the blocks of one head stay neighbours
    in launch order, reading the same K/V from L2 (with the row blocks on the slowest axis, every
    head's K/V was in flight at once and the forward measured 15% slower at 8 x 4096 on the H200)."""
    pid_m, seq, h = tl.num_programs(0) - 1 - tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(cu_ptr + seq)
    row0 = pid_m * BLOCK_M
    rm = row0 + tl.arange(0, BLOCK_M)
    L = tl.load(cu_ptr + seq + 1) - start
    return start, L, h, h // GROUP, row0, rm, tl.arange(0, D), rm < L


@triton.jit
def _rows_tile(ptr, start, r0, rows, ok, stride, col, D: tl.constexpr, TMA: tl.constexpr):
    """Rows r0 .. r0 + len(rows) of a sequence starting at token ``start``, columns col .. col + D of
    a [T, *] row buffer: by TMA when ``ptr`` is a 2-D descriptor over the whole packed batch (rows
    past the sequence are the next sequence's, zero-filled past T; every caller masks them out of
    its results), else by masked pointer loads (zeros past the sequence)."""
    if TMA:
        return ptr.load([start + r0, col])
    else:
        return tl.load(ptr + (start + rows).to(tl.int64)[:, None] * stride + col + tl.arange(0, D)[None, :],
                       mask=ok[:, None], other=0.0)


@triton.jit
def _varlen_fwd(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_ptr, qk_scale, T, sq, sk, sv, so,
                GROUP: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                TMA: tl.constexpr):
    """TMA: q, k and v are descriptors. A key past the sequence is then the next sequence's (or a
    zero past T) instead of a zero: its score is masked to -inf either way and its weight p is an
    exact 0, so every row's m, l and acc get the same bits (0 * v is a signed zero, and adding a
    zero to a sum changes nothing but, at most, the sign of an exact-zero sum: -0 + 0 is +0 where
    -0 + -0 stays -0 -- a column of v that is -0 at every visible key, which tests cannot tell
    apart with ``torch.equal`` and no model produces)."""
    start, L, h, kvh, row0, rm, rd, row_ok = _query_block(cu_ptr, GROUP, D, BLOCK_M)
    if row0 < L:
        q = _rows_tile(q_ptr, start, row0, rm, row_ok, sq, h * D, D, TMA)
        q_pos = tl.where(row_ok, rm, 0)
        m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        l_acc = tl.zeros((BLOCK_M, 16), tl.float32)
        acc = tl.zeros((BLOCK_M, D), tl.float32)
        ones = tl.full((BLOCK_N, 16), 1.0, q.dtype)
        # every key tile masked, the ones below row0 too (their mask is all true): without the select between them
        # the compiler may fuse the score's scaling into exp2's subtraction (an FMA: other bits than the paged kernel's)
        for n0 in range(0, tl.minimum(row0 + BLOCK_M, L), BLOCK_N):
            rn = n0 + tl.arange(0, BLOCK_N)
            stored = rn < L
            k = _rows_tile(k_ptr, start, n0, rn, stored, sk, kvh * D, D, TMA)
            v = _rows_tile(v_ptr, start, n0, rn, stored, sv, kvh * D, D, TMA)
            m_i, l_acc, acc = _tile_update(q, k, v, m_i, l_acc, acc, rn[None, :] <= q_pos[:, None], qk_scale, ones)
        l_i = tl.max(l_acc, 1)
        o = acc / l_i[:, None]
        tl.store(o_ptr + (start + rm).to(tl.int64)[:, None] * so + h * D + rd[None, :], o.to(o_ptr.dtype.element_ty),
                 mask=row_ok[:, None])
        tl.store(lse_ptr + h * T + start + rm, m_i + tl.math.log2(l_i), mask=row_ok)


@triton.jit
def _paged_keys(kv_ptr, bt_ptr, n0, seq_len, block_size, s_blk, s_head, s_off, kvh, D: tl.constexpr,
                BLOCK_N: tl.constexpr):
    """Key tile [n0, n0 + BLOCK_N) of a request (its block-table row at bt_ptr): the positions and
    their K and V [BLOCK_N, D] (exact zeros past the context)."""
    rn = n0 + tl.arange(0, BLOCK_N)
    rd = tl.arange(0, D)
    stored = rn < seq_len
    blk = tl.load(bt_ptr + rn // block_size, mask=stored, other=0).to(tl.int64)
    base = blk * s_blk + kvh * s_head + (rn % block_size) * s_off
    k = tl.load(kv_ptr + base[:, None] + rd[None, :], mask=stored[:, None], other=0.0)
    v = tl.load(kv_ptr + base[:, None] + D + rd[None, :], mask=stored[:, None], other=0.0)
    return rn, k, v


@triton.jit
def _paged_rows_n(q_ptr, kv_ptr, o_ptr, bt_row, qk_scale, sq, so, s_blk, s_head, s_off, block_size, q0, nq, seq_len,
                  kvh, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr, SWAP_N: tl.constexpr,
                  SWAP_STAGES: tl.constexpr):
    """A request's <= SWAP_N (token, group head) rows on the dots' N side (``_tile_update_t``),
    the key loop pipelined SWAP_STAGES deep (its own: a decode is a stream of K/V loads)."""
    rd = tl.arange(0, D)
    c = tl.arange(0, SWAP_N)
    row_ok = c < nq * GROUP
    tok = c // GROUP
    h = kvh * GROUP + c % GROUP
    q_t = tl.load(q_ptr + (q0 + tok).to(tl.int64)[None, :] * sq + h[None, :] * D + rd[:, None],
                  mask=row_ok[None, :], other=0.0)
    q_pos = tl.where(row_ok, seq_len - nq + tok, 0)
    m_i = tl.full((SWAP_N,), float("-inf"), tl.float32)
    l_acc = tl.zeros((BLOCK_N, SWAP_N), tl.float32)
    acc = tl.zeros((D, SWAP_N), tl.float32)
    ones = tl.full((BLOCK_N, BLOCK_N), 1.0, kv_ptr.dtype.element_ty)
    for n0 in tl.range(0, seq_len, BLOCK_N, num_stages=SWAP_STAGES):
        rn, k, v = _paged_keys(kv_ptr, bt_row, n0, seq_len, block_size, s_blk, s_head, s_off, kvh, D, BLOCK_N)
        m_i, l_acc, acc = _tile_update_t(k, q_t, v, m_i, l_acc, acc, rn[:, None] <= q_pos[None, :],
                                         qk_scale, ones)
    o = acc / tl.max(l_acc, 0)[None, :]
    o_off = (q0 + tok).to(tl.int64)[None, :] * so + h[None, :] * D + rd[:, None]
    tl.store(o_ptr + o_off, o.to(o_ptr.dtype.element_ty), mask=row_ok[None, :])


@triton.jit
def _paged_rows_m(q_ptr, kv_ptr, o_ptr, bt_row, qk_scale, sq, so, s_blk, s_head, s_off, block_size, q0, nq, seq_len,
                  kvh, mb, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Tile mb of a request's (token, group head) rows, BLOCK_M of them on the dots' M side."""
    rd = tl.arange(0, D)
    r = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = r < nq * GROUP
    tok = r // GROUP
    h = kvh * GROUP + r % GROUP
    q_off = (q0 + tok).to(tl.int64)[:, None] * sq + h[:, None] * D + rd[None, :]
    q = tl.load(q_ptr + q_off, mask=row_ok[:, None], other=0.0)
    q_pos = tl.where(row_ok, seq_len - nq + tok, 0)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_acc = tl.zeros((BLOCK_M, 16), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    ones = tl.full((BLOCK_N, 16), 1.0, kv_ptr.dtype.element_ty)
    last_tok = tl.minimum((mb * BLOCK_M + BLOCK_M - 1) // GROUP, nq - 1)
    hi = seq_len - nq + last_tok + 1
    for n0 in range(0, hi, BLOCK_N):
        rn, k, v = _paged_keys(kv_ptr, bt_row, n0, seq_len, block_size, s_blk, s_head, s_off, kvh, D, BLOCK_N)
        m_i, l_acc, acc = _tile_update(q, k, v, m_i, l_acc, acc, rn[None, :] <= q_pos[:, None], qk_scale,
                                       ones)
    o = acc / tl.max(l_acc, 1)[:, None]
    o_off = (q0 + tok).to(tl.int64)[:, None] * so + h[:, None] * D + rd[None, :]
    tl.store(o_ptr + o_off, o.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])


@triton.jit(do_not_specialize=["n_req"])  # one compiled kernel for every request count of a R_PAD
def _paged_fwd(q_ptr, kv_ptr, o_ptr, bt_ptr, seq_lens_ptr, qsl_ptr, qk_scale, sq, so, s_blk, s_head, s_off,
               s_bt, block_size, n_req, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, R_PAD: tl.constexpr, SWAP_N: tl.constexpr, SWAP_STAGES: tl.constexpr):
    """Program (p, kvh): one BLOCK_M tile of (token, group head) rows of one request. The schedule
    is read on the device: program r < R runs request r's first tile; programs R, R + 1, ... run
    the further tiles (cdiv(nq_r * GROUP, BLOCK_M) - 1 of request r, from query_start_loc) in
    request order, and programs past the last exit. So the grid only needs host-known sizes
    (tokens, requests) -- a CUDA graph captured for T tokens and R requests serves any mix of
    prefill chunks and decodes that fits -- and each tile holds the rows it would in any other
    schedule.

    A request of <= SWAP_N rows (a decode: GROUP rows) runs ``_tile_update_t``, its rows on the
    dots' N side: the same bits at a quarter of the tensor-core work and registers of 64 padded
    rows (the wgmma M side is at least 64)."""
    pid, kvh = tl.program_id(0), tl.program_id(1)
    if pid < n_req:  # a request's first tile: no schedule to read (every program of a decode step)
        req = pid
        mb = 0
    else:  # the requests' further tiles, in request order
        ri = tl.arange(0, R_PAD)
        live = ri < n_req
        lo = tl.load(qsl_ptr + ri, mask=live, other=0)
        n_rows = (tl.load(qsl_ptr + ri + 1, mask=live, other=0) - lo) * GROUP
        n_more = tl.maximum((n_rows + BLOCK_M - 1) // BLOCK_M - 1, 0)
        ends = tl.cumsum(n_more, 0)
        e = pid - n_req
        req = tl.sum((ends <= e).to(tl.int32), 0)  # the request whose further tiles include e (n_req: none)
        mb = 1 + e - tl.sum(tl.where(ri == req, ends - n_more, 0), 0)
    if req < n_req:
        q0 = tl.load(qsl_ptr + req)
        nq = tl.load(qsl_ptr + req + 1) - q0
        seq_len = tl.load(seq_lens_ptr + req)
        bt_row = bt_ptr + req * s_bt
        if nq == 0:  # a padding request of a captured graph
            pass
        elif nq * GROUP <= SWAP_N:  # then one tile (mb == 0)
            _paged_rows_n(q_ptr, kv_ptr, o_ptr, bt_row, qk_scale, sq, so, s_blk, s_head, s_off, block_size, q0, nq,
                          seq_len, kvh, GROUP, D, BLOCK_N, SWAP_N, SWAP_STAGES)
        else:
            _paged_rows_m(q_ptr, kv_ptr, o_ptr, bt_row, qk_scale, sq, so, s_blk, s_head, s_off, block_size, q0, nq,
                          seq_len, kvh, mb, GROUP, D, BLOCK_M, BLOCK_N)


@triton.jit
def _bwd_delta(o_ptr, do_ptr, delta_ptr, T, H, D: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # rows of [T * H], token-major
    rd = tl.arange(0, D)
    ok = rows < T * H
    off = rows.to(tl.int64)[:, None] * D + rd[None, :]
    o = tl.load(o_ptr + off, mask=ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(do_ptr + off, mask=ok[:, None], other=0.0).to(tl.float32)
    tl.store(delta_ptr + (rows % H) * T + rows // H, tl.sum(o * do, 1), mask=ok)


@triton.jit
def _bwd_rows(q_ptr, do_ptr, lse_ptr, delta_ptr, start, row0, rm, row_ok, sq, h, T, D: tl.constexpr,
              TMA: tl.constexpr):
    """One query tile of head h for the backward: q, dO (descriptors when TMA: rows past the
    sequence are masked out by ``_bwd_p_ds``), the saved lse and delta."""
    q = _rows_tile(q_ptr, start, row0, rm, row_ok, sq, h * D, D, TMA)
    do = _rows_tile(do_ptr, start, row0, rm, row_ok, sq, h * D, D, TMA)
    lse = tl.load(lse_ptr + h * T + start + rm, mask=row_ok, other=0.0)
    delta = tl.load(delta_ptr + h * T + start + rm, mask=row_ok, other=0.0)
    return q, do, lse, delta


@triton.jit
def _bwd_p_ds(q, k, v, do, lse, delta, rm, rn, row_ok, qk_scale, CAUSAL: tl.constexpr):
    """P and dS of one (query tile, key tile), recomputed from the saved lse and delta: the one
    formula both backward kernels use. CAUSAL: the tile meets the diagonal (else every stored row
    sees every key: the causal mask would be all true)."""
    s = tl.dot(q, tl.trans(k)) * qk_scale
    vis = row_ok[:, None]
    if CAUSAL:
        vis = vis & (rn[None, :] <= rm[:, None])
    p = tl.where(vis, tl.math.exp2(s - lse[:, None]), 0.0)
    dp = tl.dot(do, tl.trans(v))
    return p, p * (dp - delta[:, None])


@triton.jit
def _bwd_dkdv(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, cu_ptr, ds_ptr, qk_scale, sm_scale, T,
              sq, sk, sv, sdv, s_ds, ds_rows, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, TMA: tl.constexpr, WRITE_DS: tl.constexpr, PAD: tl.constexpr):
    """dK and dV of a key block (grid: key block, sequence, KV head; the first blocks walk the most
    query tiles and start first); v read at its own token stride ``sv``, dv stored at its own ``sdv``
    (into the qkv gradient buffer's v columns when v is a block of the qkv projection's output). (A
    transposed form -- keys on the dots' M side, P^T and dS^T as register operands, the tiles past
    the diagonal unmasked -- measured slower in the 1.7B training step: 27.8 against 20.9 ms a
    step, spilling 488 bytes for sm_90 against this form's 128.) TMA: q and dO are descriptors.
    The key block is read once, by pointers. WRITE_DS: also store each
    tile's dS, rounded as dK's dot reads it, for ``_bwd_dq_ds`` (``_ds_base``; by TMA when TMA)."""
    pid_n, seq, kvh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(cu_ptr + seq)
    L = tl.load(cu_ptr + seq + 1) - start
    if pid_n * BLOCK_N < L:
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rd = tl.arange(0, D)
        key_ok = rn < L
        tok = (start + rn).to(tl.int64)[:, None]
        kv_off = tok * sk + kvh * D + rd[None, :]
        k = tl.load(k_ptr + kv_off, mask=key_ok[:, None], other=0.0)
        v = tl.load(v_ptr + tok * sv + kvh * D + rd[None, :], mask=key_ok[:, None], other=0.0)
        dk = tl.zeros((BLOCK_N, D), tl.float32)
        dv = tl.zeros((BLOCK_N, D), tl.float32)
        for g in range(GROUP):  # the group's query heads, in order
            h = kvh * GROUP + g
            for m0 in range((pid_n * BLOCK_N // BLOCK_M) * BLOCK_M, L, BLOCK_M):  # query tiles, in order
                rm = m0 + tl.arange(0, BLOCK_M)
                row_ok = rm < L
                q, do, lse, delta = _bwd_rows(q_ptr, do_ptr, lse_ptr, delta_ptr, start, m0, rm, row_ok, sq, h, T, D,
                                              TMA)
                p, ds = _bwd_p_ds(q, k, v, do, lse, delta, rm, rn, row_ok, qk_scale, True)
                ds = ds.to(q.dtype)
                if WRITE_DS:
                    base = _ds_base(h, seq, start, ds_rows, PAD)
                    if TMA:  # the whole tile: its rows past the sequence are in this sequence's padding
                        ds_ptr.store([base + m0, pid_n * BLOCK_N], ds)
                    else:
                        tl.store(ds_ptr + (base + rm).to(tl.int64)[:, None] * s_ds + rn[None, :], ds,
                                 mask=row_ok[:, None])
                dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv)
                dk = tl.dot(tl.trans(ds), q, dk)
        tl.store(dk_ptr + kv_off, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=key_ok[:, None])
        tl.store(dv_ptr + tok * sdv + kvh * D + rd[None, :], dv.to(dv_ptr.dtype.element_ty), mask=key_ok[:, None])


@triton.jit
def _dq_key_tile(q, do, lse, delta, dq, k_ptr, v_ptr, start, n0, L, sk, sv, kvh, rm, row_ok, qk_scale,
                 D: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, TMA: tl.constexpr):
    """dQ += key tile [n0, n0 + BLOCK_N)'s part. CAUSAL: the tile meets the diagonal, so its keys are
    masked by position (those past the sequence's end: zeros, or the next sequence's by TMA, masked
    out of P and so of dS); else every key is stored and seen by every row."""
    rn = n0 + tl.arange(0, BLOCK_N)
    if TMA or CAUSAL:
        k = _rows_tile(k_ptr, start, n0, rn, rn < L, sk, kvh * D, D, TMA)
        v = _rows_tile(v_ptr, start, n0, rn, rn < L, sv, kvh * D, D, TMA)
    else:
        tok = (start + rn).to(tl.int64)[:, None]
        k = tl.load(k_ptr + tok * sk + kvh * D + tl.arange(0, D)[None, :])
        v = tl.load(v_ptr + tok * sv + kvh * D + tl.arange(0, D)[None, :])
    _, ds = _bwd_p_ds(q, k, v, do, lse, delta, rm, rn, row_ok, qk_scale, CAUSAL)
    return tl.dot(ds.to(k.dtype), k, dq)


@triton.jit
def _bwd_dq(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, cu_ptr, qk_scale, sm_scale, T, sq, sk, sv,
            GROUP: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr):
    """TMA: q, dO, k and v are descriptors (dQ is stored by pointers: a tile's rows past the
    sequence belong to the next one's programs)."""
    start, L, h, kvh, row0, rm, rd, row_ok = _query_block(cu_ptr, GROUP, D, BLOCK_M)
    if row0 < L:
        q, do, lse, delta = _bwd_rows(q_ptr, do_ptr, lse_ptr, delta_ptr, start, row0, rm, row_ok, sq, h, T, D, TMA)
        dq = tl.zeros((BLOCK_M, D), tl.float32)
        # key tiles in order: those below the block's first row, which every row sees (unmasked), then the diagonal
        interior = row0 // BLOCK_N * BLOCK_N
        for n0 in range(0, interior, BLOCK_N):
            dq = _dq_key_tile(q, do, lse, delta, dq, k_ptr, v_ptr, start, n0, L, sk, sv, kvh, rm, row_ok, qk_scale,
                              D, BLOCK_N, False, TMA)
        for n0 in range(interior, tl.minimum(row0 + BLOCK_M, L), BLOCK_N):
            dq = _dq_key_tile(q, do, lse, delta, dq, k_ptr, v_ptr, start, n0, L, sk, sv, kvh, rm, row_ok, qk_scale,
                              D, BLOCK_N, True, TMA)
        q_off = (start + rm).to(tl.int64)[:, None] * sq + h * D + rd[None, :]
        tl.store(dq_ptr + q_off, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _ds_base(h, seq, start, ds_rows, PAD: tl.constexpr):
    """The kept dS's row of query head h, token 0 of the sequence starting at token ``start``: a
    plane of ``ds_rows`` = T + sequences x PAD rows a head, each sequence's rows PAD after the last
    one's end (columns: key positions), so its last query tile, rounded up to PAD rows, is its own."""
    return h * ds_rows + start + seq * PAD


@triton.jit
def _bwd_dq_ds(ds_ptr, k_ptr, dq_ptr, cu_ptr, sm_scale, sq, sk, s_ds, ds_rows, GROUP: tl.constexpr,
               D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr, PAD: tl.constexpr):
    """``_bwd_dq`` from the dS that ``_bwd_dkdv`` stored: the same
    dots of the same dS and K tiles in the same key order, without recomputing P and dP. A diagonal
    tile's dS is zeroed past the diagonal (``_bwd_dkdv`` wrote no rows of a query tile that ends
    before its key block); rows past the sequence are never stored. TMA: ds and k are descriptors."""
    start, L, h, kvh, row0, rm, rd, row_ok = _query_block(cu_ptr, GROUP, D, BLOCK_M)
    if row0 < L:
        base = _ds_base(h, tl.program_id(1), start, ds_rows, PAD)
        dq = tl.zeros((BLOCK_M, D), tl.float32)
        interior = row0 // BLOCK_N * BLOCK_N
        for n0 in range(0, interior, BLOCK_N):  # key tiles every row sees, then the diagonal's
            rn = n0 + tl.arange(0, BLOCK_N)
            k = _rows_tile(k_ptr, start, n0, rn, rn < L, sk, kvh * D, D, TMA)
            dq = tl.dot(_rows_tile(ds_ptr, base, row0, rm, row_ok, s_ds, n0, BLOCK_N, TMA), k, dq)
        for n0 in range(interior, tl.minimum(row0 + BLOCK_M, L), BLOCK_N):
            rn = n0 + tl.arange(0, BLOCK_N)
            k = _rows_tile(k_ptr, start, n0, rn, rn < L, sk, kvh * D, D, TMA)
            ds = _rows_tile(ds_ptr, base, row0, rm, row_ok, s_ds, n0, BLOCK_N, TMA)
            dq = tl.dot(tl.where(rn[None, :] <= rm[:, None], ds, 0.0), k, dq)
        q_off = (start + rm).to(tl.int64)[:, None] * sq + h * D + rd[None, :]
        tl.store(dq_ptr + q_off, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])


def keeps_ds(rows: int, width: int, heads: int, elem_size: int, dq_warps: int) -> bool:
    """Whether the backward keeps dS: a [rows, width] plane a query head in the input dtype, all heads
    at once, within ``DS_BYTES`` (else dQ recomputes it: kept in chunks of KV heads, the smaller
    dK/dV grids measured slower than recomputing at 8 x 4096 tokens, 32/8 heads), and dQ's kernel
    at 4 warps (one warpgroup). At 8 warps and 128 query rows Triton 3.6's build of ``_bwd_dq_ds``
    gave other dQ bits run to run on the H200 (rows 48-55 and 64-71 of a tile, at random; none of
    them read an unwritten element: ``benchmarks/triton/attention_ds_check.py``, session 23)."""
    return dq_warps == 4 and heads * rows * width * elem_size <= DS_BYTES


def _check_head_dim(d: int) -> None:
    if d < 16 or d & (d - 1):
        raise ValueError(f"triton attention: head_dim {d} must be a power of two >= 16")


def _rows_descs(rows: int, *xs: torch.Tensor) -> list:
    """A [T, H * D] TMA descriptor over each [T, H, D] x (heads contiguous, tokens at x's stride),
    tiles of ``rows`` tokens x one head: what ``_rows_tile`` loads."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    return [TensorDescriptor(x, [x.shape[0], x.shape[1] * x.shape[2]], [x.stride(0), 1], [rows, x.shape[2]])
            for x in xs]


def _ds_descs(ds: torch.Tensor, *blocks: tuple[int, int]) -> list:
    """TMA descriptors over the kept dS, one a tile shape (the dK/dV kernel's store, dQ's load)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    return [TensorDescriptor(ds, list(ds.shape), [ds.stride(0), 1], list(b)) for b in blocks]


def _forward(q, k, v, cu_seqlens, scale, config, tma, kernel):
    """The training forward's output and log-sum-exp (base 2, [Hq, T]) by the kernel that ``kernel``,
    ``config`` and the tensors pick (``varlen_attention``); with cu_seqlens as int32 on q's device, the
    ``tma`` flag and the max length used."""
    t, hq, d = q.shape
    cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
    # one host read per forward, not per layer: every layer passes the same cu_seqlens
    max_len = read_cu_seqlens(cu_seqlens)[2]
    o = torch.empty_like(q)
    lse = torch.empty(hq, t, dtype=torch.float32, device=q.device)
    tma = tma_ok(q, k, v) if tma is None else tma
    sm90 = tma and attention_sm90.usable(q, k, v)
    if kernel is None:
        kernel = FWD_KERNEL if sm90 and config is None else "triton"
    if kernel == "sm90" and not sm90:
        raise ValueError("triton attention: kernel 'sm90' needs an sm_90 GPU, bf16/fp16 q, k, v that TMA can "
                         f"address and head_dim 64 or 128 (got {q.dtype}, head_dim {d}, device {q.device})")
    if t and max_len and kernel == "sm90":
        bind_cuda_context(q.device)
        attention_sm90.launch(q, k, v, o, lse, cu, scale * LOG2E, max_len)
    elif t and max_len:
        block_m, warps, stages = config or TRAIN_CONFIG
        grid = (cdiv(max_len, block_m), cu.numel() - 1, hq)
        if tma:
            bind_cuda_context(q.device)
            qa, ka, va = _rows_descs(block_m, q) + _rows_descs(BLOCK_N, k, v)
        else:
            qa, ka, va = q, k, v
        _varlen_fwd[grid](qa, ka, va, o, lse, cu, scale * LOG2E, t, q.stride(0), k.stride(0), v.stride(0),
                          o.stride(0), GROUP=hq // k.shape[1], D=d, BLOCK_M=block_m, BLOCK_N=BLOCK_N, TMA=tma,
                          num_warps=warps, num_stages=stages)
    return o, lse, cu, max_len, tma


class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens, scale, config, bwd_config, tma, kernel):
        ctx.v_block = column_slot(v)  # dv's columns of the qkv gradient buffer (backward), when v is a qkv block
        # v is read in place at its token stride (in a model, a slice of the qkv projection's rows: no copy)
        q, k, v = q.contiguous(), k.contiguous(), v if v.stride()[1:] == (v.shape[2], 1) else v.contiguous()
        o, lse, cu, max_len, tma = _forward(q, k, v, cu_seqlens, scale, config, tma, kernel)
        ctx.save_for_backward(q, k, v, o, lse, cu)
        ctx.scale, ctx.max_len, ctx.bwd_config, ctx.tma = scale, max_len, bwd_config, tma
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, cu = ctx.saved_tensors
        t, hq, d = q.shape
        hkv = k.shape[1]
        do = do.contiguous()
        dq, dk = torch.empty_like(q), torch.empty_like(k)
        # dv at v's columns of the qkv gradient buffer when v is a block of the qkv projection's output (the q/k
        # norm's backward then puts dq and dk beside it, and split_columns' backward returns the buffer: no copy)
        dv = shared_column_buffer(ctx.v_block, v)
        dv = dv if dv is not None else torch.empty_like(k)
        if t and ctx.max_len:
            delta = torch.empty(hq, t, dtype=torch.float32, device=q.device)
            _bwd_delta[(cdiv(t * hq, 64),)](o, do, delta, t, hq, D=d, BLOCK=64)
            args = (lse, delta)
            n_seq = cu.numel() - 1
            (bm, bn, warps, stages), (bm2, bn2, warps2, stages2) = ctx.bwd_config
            tma = ctx.tma and tma_ok(do)
            group = hq // hkv
            # dS kept: a plane of `rows` (tokens, each sequence padded) x `width` (key positions) a query head
            pad = max(bm, bn, bm2, bn2)
            width, rows = cdiv(ctx.max_len, pad) * pad, t + n_seq * pad
            keep = keeps_ds(rows, width, hq, q.element_size(), warps2)
            if not keep:  # dQ recomputes P and dS from q, k, v and dO
                bm2, bn2, warps2, stages2 = DQ_RECOMPUTE_CONFIG
            if tma:
                bind_cuda_context(q.device)  # autograd's device thread may have no context yet
                q1, do1, k2 = _rows_descs(bm, q, do) + _rows_descs(bn2, k)
                q2, do2, v2 = (None,) * 3 if keep else _rows_descs(bm2, q, do) + _rows_descs(bn2, v)
            else:
                q1, do1, q2, do2, k2, v2 = q, do, q, do, k, v
            ds = torch.empty(hq * rows, width, dtype=q.dtype, device=q.device) if keep else dk  # dk: an unused pointer
            ds1, ds2 = _ds_descs(ds, (bm, bn), (bm2, bn2)) if keep and tma else (ds, ds)
            _bwd_dkdv[(cdiv(ctx.max_len, bn), n_seq, hkv)](
                q1, k, v, do1, *args, dk, dv, cu, ds1, ctx.scale * LOG2E, ctx.scale, t, q.stride(0), k.stride(0),
                v.stride(0), dv.stride(0), width, rows, GROUP=group, D=d, BLOCK_M=bm, BLOCK_N=bn, TMA=tma,
                WRITE_DS=keep, PAD=pad, num_warps=warps, num_stages=stages)
            dq_launch = dict(GROUP=group, D=d, BLOCK_M=bm2, BLOCK_N=bn2, TMA=tma, num_warps=warps2, num_stages=stages2)
            if keep:  # dQ is one dot a tile
                _bwd_dq_ds[(cdiv(ctx.max_len, bm2), n_seq, hq)](
                    ds2, k2, dq, cu, ctx.scale, q.stride(0), k.stride(0), width, rows, PAD=pad, **dq_launch)
            else:
                _bwd_dq[(cdiv(ctx.max_len, bm2), n_seq, hq)](
                    q2, k2, v2, do2, *args, dq, cu, ctx.scale * LOG2E, ctx.scale, t, q.stride(0), k.stride(0),
                    v.stride(0), **dq_launch)
        else:
            dq.zero_(), dk.zero_(), dv.zero_()
        return dq, dk, dv, None, None, None, None, None, None


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     scale: float, config: tuple[int, int, int] | None = None,
                     bwd_config: tuple[tuple[int, int, int, int], tuple[int, int, int, int]] | None = None,
                     tma: bool | None = None, kernel: str | None = None) -> torch.Tensor:
    """Causal self-attention of packed sequences: q [T, Hq, D], k/v [T, Hkv, D], sequence s
    spans tokens cu_seqlens[s]:cu_seqlens[s+1]. Returns [T, Hq, D] in q's dtype. ``config`` /
    ``bwd_config`` override the forward's / the backward's launch (``TRAIN_CONFIG``; ``BWD_CONFIG``, below
    head_dim 128 ``BWD_CONFIG_SMALL_D``);
    ``tma`` the loads of q, k, v and dO (default: TMA descriptors on the GPU where they can address
    the tensors, ``utils.tma_ok``; the same bits either way). ``kernel`` picks the forward: "sm90"
    (``attention_sm90``, Gluon; sm_90 with TMA loads only), "triton" (``_varlen_fwd``), or by default
    ``FWD_KERNEL`` where it can run and no ``config`` is given, else "triton" -- the same bits."""
    check_attention(q, k, v, cu_seqlens)
    _check_head_dim(q.shape[2])
    if kernel not in (None, "sm90", "triton"):
        raise ValueError(f"triton attention: kernel must be 'sm90' or 'triton', got {kernel!r}")
    bwd_config = bwd_config or (BWD_CONFIG if q.shape[2] >= 128 else BWD_CONFIG_SMALL_D)
    return run_forward(_VarlenAttention, q, k, v, cu_seqlens, float(scale), config, bwd_config, tma, kernel)


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor,
                    query_start_loc: torch.Tensor, scale: float, out: torch.Tensor | None = None,
                    config: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """Attention of the tokens scheduled in one step (decode tokens and prefill chunks mixed)
    against vLLM's paged cache.

    q [T, Hq, D] (request r owns tokens query_start_loc[r]:query_start_loc[r+1], the last ones of
    its context of seq_lens[r] tokens); kv_cache: the logical view [num_blocks, Hkv, block_size,
    2 D] (K then V; any strides); block_table [R, max_blocks]. The step's own K/V must already
    be written (``rlk_models.ops.paged.write_kv``). Returns [T, Hq, D] (into ``out`` if given).
    The grid comes from T and R alone (``_paged_fwd`` reads its schedule from query_start_loc on
    the device): no device value is read on the host, and a launch captured in a CUDA graph for T
    tokens and R requests is right for every step whose tokens and requests fit it -- requests
    past the real ones with no tokens (query_start_loc repeating its last value) and tokens past
    the last request's are left untouched."""
    check_paged_attention(q, kv_cache)
    _check_head_dim(q.shape[2])
    t, hq, d = q.shape
    nb, hkv, bs, _ = kv_cache.shape
    if kv_cache.stride(3) != 1:
        raise ValueError("paged attention: the cache's last dim must be contiguous")
    out = torch.empty_like(q) if out is None else out
    n_req = seq_lens.shape[0]
    if t == 0 or n_req == 0:
        return out
    group = hq // hkv
    block_m, warps, stages, swap_stages = config or PAGED_CONFIG
    # R first tiles + sum over requests of (cdiv(nq_r * group, block_m) - 1) <= R + cdiv(T * group, block_m)
    grid = (cdiv(t * group, block_m) + n_req, hkv)
    _paged_fwd[grid](q, kv_cache, out, block_table, seq_lens.to(device=q.device, dtype=torch.int32),
                     query_start_loc.to(device=q.device, dtype=torch.int32), scale * LOG2E, q.stride(0),
                     out.stride(0), kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2),
                     block_table.stride(0), bs, n_req, GROUP=group, D=d, BLOCK_M=block_m, BLOCK_N=BLOCK_N,
                     R_PAD=max(16, next_power_of_2(n_req)), SWAP_N=SWAP_N, SWAP_STAGES=swap_stages,
                     num_warps=warps, num_stages=stages)
    return out


__all__ = ["BLOCK_N", "paged_attention", "varlen_attention"]
