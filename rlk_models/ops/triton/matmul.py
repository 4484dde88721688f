"""Batch-invariant matmul / linear in Triton: a fixed K order per layer kind, forward and
backward, with a persistent TMA kernel and, for row-parallel layers, a split-K path for small M
that gives the same bits.

What it computes
    y[m, n] = sum_k x[m, k] w[n, k] with fp32 accumulation (+ bias in fp32), rounded once to
    the output dtype.

Contract
    K-tiles of ``BLOCK_K`` = 64 are accumulated in increasing order by ``tl.dot`` into an fp32
    accumulator that starts at zero. That is the whole order of a *column-parallel* linear
    (qkv, gate_up, and every backward GEMM): one group. A *row-parallel* linear (o_proj,
    down_proj: the layers whose K tensor parallelism splits; ``row_parallel=True``) cuts K into
    ``k_groups(K)`` contiguous groups -- 8 when K is a multiple of 8 * BLOCK_K, else 1, a
    function of K only -- and reduces each from zero in that order. The 8 group partials form
    two *halves* (groups 0-3, 4-7); each half is folded in group order from zero, and the halves
    are added: ``h0 = (((0 + p0) + p1) + p2) + p3``, ``h1`` likewise, ``y = (0 + h0) + h1``, then
    the bias (contract version 3; version 2 folded all 8 in order). The halves make TP=2 cheap:
    a rank owns one half, and the one addition h0 + h1 is what any fp32 all-reduce of two
    values computes (IEEE addition is commutative), so ranks all-reduce one fp32 partial
    instead of gathering four. Nothing about the order depends on M, N, the tile shape or the
    SM count. For grouped K, these launch forms compute it: *fused* (one program per output tile
    walks the groups, keeping the running half and the first half's sum in registers) and
    *split-K* (one program per (tile, group) -- ``split=1`` -- or per (tile, half) -- ``split=4``,
    the rank's computation at TP=2 -- writes its fp32 partial to a buffer; a second kernel folds
    them by the same halves) -- split-K fills the GPU at decode sizes. (A
    third, one flattened loop over (tile, group) units so that the software pipeline would not
    drain at group boundaries, gave the same bits but measured 1.02-1.14x slower than the fused
    loops on the H200: dropped. The *flat* form, ``Launch.flat``, asks the compiler for the same
    thing instead: one tile per program and K loops whose bounds do not move with the group, the
    conditions under which Triton's loop-nest fusion makes one pipelined loop of a group loop and
    its K loop; a candidate, not yet timed.) For plain K a
    *swap* launch computes the same tiles as w @ x^T -- the weight's rows on the tile's M side, the
    MMA's 64/128-row side, the tokens on its N side, as cuBLAS's small-M kernels do -- and stores
    each tile transposed: the same products summed over the same K-tiles in the same order. On an
    sm_90 GPU the fused grouped form also has a Gluon kernel (``matmul_sm90``, ``Launch.sm90``:
    warp-specialized, its two warpgroups taking turns so one folds a group while the other's dot
    runs), the default above 128 rows (256 at Qwen3-1.7B's shapes): 64-row tiles, the warpgroups splitting
    the columns, to 256 rows (512 at 1.7B), 128-row tiles above; for plain K the same kernel in one
    group is a candidate (``SM90_PLAIN_CANDIDATES``). Which
    form, tile config and grid run is chosen by M, N and K (``launch_for``); every choice gives the
    same bits, which the tests (interpreter: tests/ops/triton; H200:
    tests/gpu/test_triton_contract_8b.py) check. The groups are also the tensor-parallel unit: a
    rank owning a contiguous 1/k of K (k | 8) owns whole groups (``shard_partial``): at TP=2 it
    returns its half's sum (one fp32 tensor, which vLLM all-reduces); at TP=4/8 its group partials,
    which are gathered and folded in rank order by the halves (``combine_partials``) -- TP=k gives
    TP=1's bits.

Backward
    dx = dy @ w and dw = dy^T @ x by the same kernels on transposed operand layouts (TMA loads
    the natural layout and transposes in registers), in one K-group (plain K order: gradients
    promise determinism, not invariance): no atomics, fp32 accumulation, one rounding.
    db = ones @ dy, likewise.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..canonical import LINEAR_K_GROUPS as K_GROUPS
from ..canonical import Partials
from . import matmul_sm90
from .utils import (
    BLOCK_K,
    ONE_PASS,
    bind_cuda_context,
    cdiv,
    device_file,
    dot_k_range,
    fit_stages,
    next_power_of_2,
    num_sms,
    tma_ok,
)

HALF = K_GROUPS // 2  # groups per half: the run folded in order before the halves are added


def k_groups(k: int) -> int:
    return K_GROUPS if k % (K_GROUPS * BLOCK_K) == 0 else 1


def run_of(groups: int) -> int:
    """How many consecutive group partials are folded in order before the runs are added: the
    halves for 8 groups; one run (a plain fold) for a rank's 4, 2 or 1."""
    return min(groups, HALF)


@triton.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    in_group = GROUP_M * num_pid_n
    first_m = (tile // in_group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % size_m), (tile % in_group) // size_m


@triton.jit
def _mm_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, KG, sam, sak, sbn, sbk, scm, scn,
               HAS_BIAS: tl.constexpr, GROUPS: tl.constexpr, RUN: tl.constexpr, SPLIT: tl.constexpr,
               BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGS: tl.constexpr,
               C_T: tl.constexpr = False, ACC: tl.constexpr = False):
    """Pointer loads (any strides; runs in the interpreter); the TMA kernel's two forms. C_T (swap
    launch): A is the weight and B the tokens, c's strides address the [tokens, weight rows]
    output, and the bias runs along M. ACC: c = c + the product (``mm(..., accumulate=True)``)."""
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        c_off = rm[:, None].to(tl.int64) * scm + rn[None, :] * scn
        c_mask = (rm[:, None] < M) & (rn[None, :] < N)
        if SPLIT == 1:  # program axis 1: the group
            g = tl.program_id(1)
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            part = dot_k_range(a_ptr, b_ptr, rm, rn, rk, M, N, K, g * KG, g * KG + KG, sam, sak, sbn, sbk, part,
                               BLOCK_K)
            tl.store(c_ptr + g.to(tl.int64) * M * N + c_off, part, mask=c_mask)
        elif SPLIT:  # program axis 1: a run of SPLIT consecutive groups, folded in order from zero
            r = tl.program_id(1)
            run = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for g in range(r * SPLIT, r * SPLIT + SPLIT):
                part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                part = dot_k_range(a_ptr, b_ptr, rm, rn, rk, M, N, K, g * KG, g * KG + KG, sam, sak, sbn, sbk, part,
                                   BLOCK_K)
                run = run + part
            tl.store(c_ptr + r.to(tl.int64) * M * N + c_off, run, mask=c_mask)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            if GROUPS == RUN:  # one run: fold the group partials straight into acc
                for g in range(GROUPS):
                    part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                    part = dot_k_range(a_ptr, b_ptr, rm, rn, rk, M, N, K, g * KG, g * KG + KG, sam, sak, sbn, sbk,
                                       part, BLOCK_K)
                    acc = acc + part
            else:  # the halves: each run folded from zero, the runs' sums added in order
                for r in tl.static_range(GROUPS // RUN):
                    run = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                    for g in range(r * RUN, r * RUN + RUN):
                        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                        part = dot_k_range(a_ptr, b_ptr, rm, rn, rk, M, N, K, g * KG, g * KG + KG, sam, sak, sbn,
                                           sbk, part, BLOCK_K)
                        run = run + part
                    acc = acc + run
            if HAS_BIAS:
                if C_T:
                    acc += tl.load(bias_ptr + rm, mask=rm < M, other=0.0).to(tl.float32)[:, None]
                else:
                    acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
            if ACC:
                acc = tl.load(c_ptr + c_off, mask=c_mask, other=0.0).to(tl.float32) + acc
            tl.store(c_ptr + c_off, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def _load_ab(a_desc, b_desc, pid_m, pid_n, k0, A_KM: tl.constexpr, B_KN: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr):
    if A_KM:
        a = a_desc.load([k0, pid_m * BLOCK_M]).T
    else:
        a = a_desc.load([pid_m * BLOCK_M, k0])
    if B_KN:
        b = b_desc.load([k0, pid_n * BLOCK_N])
    else:
        b = b_desc.load([pid_n * BLOCK_N, k0]).T
    return a, b


@triton.jit
def _group_tma(a_desc, b_desc, pid_m, pid_n, k_lo, k_hi, KG, part, A_KM: tl.constexpr, B_KN: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FLAT: tl.constexpr):
    """part += the K-tiles of [k_lo, k_hi) (k_hi = k_lo + KG) in increasing order; TMA zero-fills
    the K tail. FLAT: the same tiles by a loop whose bounds (0, KG) do not move with the enclosing
    group loop -- one of the two conditions under which Triton fuses the group and K loops into one
    software-pipelined loop (``_mm_tma_tile``)."""
    if FLAT:
        for kk in range(0, KG, BLOCK_K):
            a, b = _load_ab(a_desc, b_desc, pid_m, pid_n, k_lo + kk, A_KM, B_KN, BLOCK_M, BLOCK_N)
            part = tl.dot(a, b, part)
    else:
        for k0 in range(k_lo, k_hi, BLOCK_K):
            a, b = _load_ab(a_desc, b_desc, pid_m, pid_n, k0, A_KM, B_KN, BLOCK_M, BLOCK_N)
            part = tl.dot(a, b, part)
    return part


@triton.jit
def _mm_tma_tile(a_desc, b_desc, c_desc, bias_ptr, M, N, KG, pid_m, pid_n, HAS_BIAS: tl.constexpr,
                 GROUPS: tl.constexpr, RUN: tl.constexpr, SPLIT: tl.constexpr, A_KM: tl.constexpr,
                 B_KN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 C_T: tl.constexpr, FLAT: tl.constexpr, ACC: tl.constexpr):
    """One output tile (``_mm_tma_kernel``). FLAT: the group loops carry ``flatten``; with no tile
    loop around them (one tile per program) each heads its own loop nest, and Triton fuses it with
    its K loop into one pipelined loop, so the TMA loads run on across group boundaries instead of
    the pipeline draining and refilling at each (a per-group run of 8 K-tiles at K = 4096)."""
    if SPLIT == 1:  # program axis 1: the group
        g = tl.program_id(1)
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        part = _group_tma(a_desc, b_desc, pid_m, pid_n, g * KG, g * KG + KG, KG, part, A_KM, B_KN, BLOCK_M,
                          BLOCK_N, BLOCK_K, FLAT)
        c_desc.store([g, pid_m * BLOCK_M, pid_n * BLOCK_N], tl.reshape(part, (1, BLOCK_M, BLOCK_N)))
    elif SPLIT:  # program axis 1: a run of SPLIT consecutive groups, folded in order from zero
        r = tl.program_id(1)
        run = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for g in tl.range(r * SPLIT, r * SPLIT + SPLIT, flatten=FLAT):
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            part = _group_tma(a_desc, b_desc, pid_m, pid_n, g * KG, g * KG + KG, KG, part, A_KM, B_KN, BLOCK_M,
                              BLOCK_N, BLOCK_K, FLAT)
            run = run + part
        c_desc.store([r, pid_m * BLOCK_M, pid_n * BLOCK_N], tl.reshape(run, (1, BLOCK_M, BLOCK_N)))
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if GROUPS == RUN:  # one run (GROUPS == 1: the plain K loop, pipelined across tiles)
            for g in tl.range(GROUPS, flatten=FLAT):
                part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                part = _group_tma(a_desc, b_desc, pid_m, pid_n, g * KG, g * KG + KG, KG, part, A_KM, B_KN,
                                  BLOCK_M, BLOCK_N, BLOCK_K, FLAT)
                acc = acc + part
        else:  # the halves: each run folded from zero, the runs' sums added in order
            for r in tl.static_range(GROUPS // RUN):
                run = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for g in tl.range(r * RUN, r * RUN + RUN, flatten=FLAT):
                    part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                    part = _group_tma(a_desc, b_desc, pid_m, pid_n, g * KG, g * KG + KG, KG, part, A_KM, B_KN,
                                      BLOCK_M, BLOCK_N, BLOCK_K, FLAT)
                    run = run + part
                acc = acc + run
        _tile_epilogue(c_desc, bias_ptr, M, N, pid_m, pid_n, acc, HAS_BIAS, BLOCK_M, BLOCK_N, C_T, ACC)


@triton.jit
def _tile_epilogue(c_desc, bias_ptr, M, N, pid_m, pid_n, acc, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, C_T: tl.constexpr, ACC: tl.constexpr):
    """A finished tile of the TMA kernels (fp32 ``acc``): + bias, (ACC) + out's tile, one rounding, the store."""
    if HAS_BIAS:
        if C_T:
            rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            acc += tl.load(bias_ptr + rm, mask=rm < M, other=0.0).to(tl.float32)[:, None]
        else:
            rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    if C_T:
        c_desc.store([pid_n * BLOCK_N, pid_m * BLOCK_M], tl.trans(acc).to(c_desc.dtype))
    else:
        if ACC:  # out's tile by pointer loads straight to registers (no shared-memory buffer beside the store's);
            #       no bias with ACC, so bias_ptr is out itself (mm passes out when there is no bias)
            rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            old = tl.load(bias_ptr + rm[:, None].to(tl.int64) * N + rn[None, :],
                          mask=(rm[:, None] < M) & (rn[None, :] < N), other=0.0)
            acc = old.to(tl.float32) + acc
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


@triton.jit
def _mm_tma_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K, KG, HAS_BIAS: tl.constexpr, GROUPS: tl.constexpr,
                   RUN: tl.constexpr, SPLIT: tl.constexpr, A_KM: tl.constexpr, B_KN: tl.constexpr,
                   BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGS: tl.constexpr,
                   C_T: tl.constexpr = False, FLAT: tl.constexpr = False, ACC: tl.constexpr = False):
    """TMA tensor descriptors (Hopper). SPLIT (> 0): program axis 1 is a run of SPLIT groups and
    c_desc is the [GROUPS / SPLIT, M, N] fp32 partial buffer. C_T (swap launch, SPLIT = 0): A is
    the weight, B the tokens; each tile is stored transposed into the [tokens, weight rows]
    output and the bias runs along M. FLAT (``Launch.flat``): one tile per program and no tile
    loop (``_mm_tma_tile``); otherwise a (possibly persistent) loop over tiles, which Triton
    flattens with a single inner K loop (plain K)."""
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    if FLAT:
        pid_m, pid_n = _tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
        _mm_tma_tile(a_desc, b_desc, c_desc, bias_ptr, M, N, KG, pid_m, pid_n, HAS_BIAS, GROUPS, RUN, SPLIT, A_KM,
                     B_KN, BLOCK_M, BLOCK_N, BLOCK_K, C_T, FLAT, ACC)
    else:
        for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGS, flatten=True):
            pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
            _mm_tma_tile(a_desc, b_desc, c_desc, bias_ptr, M, N, KG, pid_m, pid_n, HAS_BIAS, GROUPS, RUN, SPLIT,
                         A_KM, B_KN, BLOCK_M, BLOCK_N, BLOCK_K, C_T, FLAT, ACC)


@triton.jit
def fold_parts(p_ptr, idx, ok, MN, acc, GROUPS: tl.constexpr, RUN: tl.constexpr):
    """acc (zeros, the shape of idx) + the fused kernel's sum of GROUPS fp32 partials at element offsets idx of
    each [MN] partial: runs of RUN folded in order from zero, the runs' sums added in order. The one fold
    ``_fold_kernel`` and the RMSNorm of unfolded partials (``rms_norm._rms_fwd``) both run, so they round alike."""
    for r in tl.static_range(GROUPS // RUN):
        run = tl.zeros_like(acc)
        for g in tl.static_range(r * RUN, r * RUN + RUN):
            run = run + tl.load(p_ptr + g * MN + idx, mask=ok, other=0.0)
        acc = acc + run
    return acc


@triton.jit
def _fold_kernel(p_ptr, c_ptr, bias_ptr, M, N, HAS_BIAS: tl.constexpr, GROUPS: tl.constexpr, RUN: tl.constexpr,
                 BLOCK: tl.constexpr):
    """c = the fused kernel's sum of GROUPS partials (runs of RUN folded in order from zero, the
    runs' sums added in order) (+ bias), rounded once. A program folds BLOCK columns of one row (grid: rows,
    column blocks), so the bias's column is the program's own and not a remainder of a flat int64 index by N (a
    64-bit division, which sm_90 runs as a subroutine call a thread)."""
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < N
    idx = tl.program_id(0).to(tl.int64) * N + cols
    acc = fold_parts(p_ptr, idx, ok, M * N, tl.zeros((BLOCK,), dtype=tl.float32), GROUPS, RUN)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(c_ptr + idx, acc.to(c_ptr.dtype.element_ty), mask=ok)


FOLD_BLOCK = 1024  # the most columns a program of ``_fold_kernel`` folds


def fold_grid(m: int, n: int) -> tuple[tuple[int, int], int]:
    """``_fold_kernel``'s grid (rows, column blocks) for [m, n] outputs, and its BLOCK: a row's columns in
    blocks of ``FOLD_BLOCK``, or in one block of the power of two above n where n is narrower."""
    block = min(FOLD_BLOCK, next_power_of_2(n))
    return (m, cdiv(n, block)), block


def fold_partials(parts: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None, count: int, run: int
                  ) -> torch.Tensor:
    """out = ``count`` fp32 partials (``parts``, contiguous [count, *out.shape]) folded by ``_fold_kernel`` (runs
    of ``run`` in order from zero, the runs' sums added in order) + bias, rounded once to out's dtype: a split-K
    launch's second kernel and ``combine_partials``."""
    n = out.shape[-1]
    m = out.numel() // n
    grid, block = fold_grid(m, n)
    _fold_kernel[grid](parts, out, bias if bias is not None else out, m, n, bias is not None, count, run, block)
    return out


class Launch(NamedTuple):
    """How one product runs; no field changes the bits (the contract tests prove it per field)."""

    config: tuple[int, int, int, int]  # (BLOCK_M, BLOCK_N, num_warps, num_stages); BLOCK_K is fixed
    split: int = 0  # grouped K only: 0 fused; n > 0 split-K, one program per n groups (1: per group,
    #                 HALF: per half) writing fp32 partials, then the fold kernel
    persistent: bool = True  # grid = min(SMs, tiles); else one program per tile
    swap: bool = False  # plain K, forward layouts only: the weight's rows take the tile's M side (the
    #                     MMA's wide side) and the tokens its N side, as cuBLAS's small-M kernels do;
    #                     config = (weight rows, tokens, warps, stages); tiles stored transposed
    flat: bool = False  # TMA kernel: one tile per program (persistent ignored); grouped K: group and K-tile
    #                     loops that Triton fuses into one pipelined loop (``_mm_tma_tile``)
    sm90: bool = False  # forward layouts, sm_90: the Gluon fused form (``matmul_sm90``: warp-specialized, its two
    #                     warpgroups taking turns so one folds at a group boundary while the other's dots run);
    #                     config = (128, BLOCK_N <= 128, warps ignored, K slots), or (64, BLOCK_N <= 256, ...):
    #                     the warpgroups split the columns (plain K: twice the columns), or (192, BLOCK_N <= 64):
    #                     three warpgroups (plain K: BLOCK_N <= 128; ``matmul_sm90.serves_tile``); persistent:
    #                     one program an SM, its loader running into the next tile. From a table, where it
    #                     cannot serve the product (another GPU, fp32 operands, transposed layouts, tma=False):
    #                     ``sm90_fallback`` (the Triton form of its K order and tile height)
    tail: bool = False  # sm90, 128-row tiles: the rows past the last whole wave of tiles (``wave_rows``) run as a
    #                     second launch in ``SM90_TAIL``'s 64-row tiles where those fit one wave (M = 768 at 8B: 512
    #                     rows in one wave of 128 tiles, 256 in one of 128 half tiles, not 192 tiles in 1.45 waves)
    block_k: int = BLOCK_K  # the TMA kernel's K-tile load, a multiple of the contract's BLOCK_K: 128 loads two of
    #                     its K-tiles a pipeline step and takes them in one ``tl.dot``. On the GPU a dot is a chain of
    #                     k16 MMAs (wgmma, mma.sync) into the accumulator, in K order, so one dot over 128 and two
    #                     over 64 run the same MMAs in the same order: the same bits (tests/gpu proves each form).
    #                     Not so under the interpreter, where a dot is one numpy product: there ``mm`` refuses it
    #                     (a table's default falls back to BLOCK_K). Session 40: qkv's small-M launches take ~250 ns
    #                     a 64-wide K-tile whatever their tile or grid (a pipeline step's waits and barriers), so
    #                     half the steps; session 16's "unroll 2" (two dots a step) lost to a wgmma wait between its
    #                     dots, which one dot does not have. Session 41: proven bitwise on the H200, and the default
    #                     of the small-M launches it made faster (``TUNED``). sm90: each K slot block_k wide, one
    #                     wgmma a slot (the same chain of k16 MMAs; fewer, larger slots in shared memory)
    # Dropped, each proven bitwise on the GPU and slower (docs/benchmarks.md): ``streamk`` (session 46: the tiles'
    # K-tiles dealt out evenly over one program an SM; 1.07-1.73x the persistent launch's time, H100; 2bae642 has
    # it) and ``last_folds`` (session 47: a split launch's tiles folded by their last program, no fold kernel;
    # slower than the fold inside the norm at 22 of 24 decode-size layer points, H100; 379331a has it)


# Defaults by (K order, width, M bucket): "plain" = one group (column-parallel, backward),
# "groups" = canonical K-groups (row-parallel); narrow = N <= 8192. Picked from the H200 sweep
# (benchmarks/triton/matmul_sweep.py --search, docs/benchmarks.md). Session 9's search and re-sweep:
# qkv M <= 16 the swap launch, 1.47-1.56x -> 1.10-1.23x cuBLAS (M = 17-32 swap too: timed at 16 only;
# the 6-stage plain tile measured 2.16x at 32); qkv M = 33-64 a 6-stage pipeline, 1.50x -> 1.25x; o
# M = 129-256 split by halves, 1.71x -> 1.46x (search); o above 256, 128x128 tiles, 1.55-2.80x -> 1.30-1.41x.
# Session 10 (search, then the table re-timed as a whole): grouped M > 64 run the flat form. o 8B
# 1.29-1.51x -> 1.15-1.36x (M = 128 and >= 512; 1.39x -> 1.47x at M = 256, where split=0 was 1.22x but
# split by halves is faster for the other three shapes), o 1.7B 1.51-2.40x -> 1.24-2.04x, down 1.7B
# 1.19-1.94x -> 1.11-1.78x, down 8B 1.05-1.87x (was 1.08-1.93x). M = 33-64 keep (64, 256, 4, 3) split=1:
# flat (64, 64, 4, 4) by halves was faster for o 8B only (down 1.08x -> 1.22x, down 1.7B 1.02x -> 1.39x).
# Session 14 (search at M = 128 with a bitwise check of every timed launch): grouped M = 65-128 flat
# (64, 64, 4, 4) by halves: o 8B 1.38x -> 1.16x, down 8B 1.87x -> 1.25x, down 1.7B 1.78x -> 1.08x, o 1.7B
# 1.84x -> 1.33x (search). The warp-specialised K loop lost at every M and shape it was timed at.
# Session 16 (search with the pipeline depth swept, every timed launch checked bitwise): at K = 4096 a K loop
# streaming its weight on fewer programs than SMs wants 6-8 stages, not 4: qkv 8B M = 33-64 1.25x -> 1.11x,
# M = 65-128 1.53x -> 1.13x; o 8B M = 33-64 1.43x -> 1.34x (M = 17-32 stay split per group: 1.33x by
# halves), 65-128 1.10x -> 1.02x, 129-256 (split=0 now) 1.27x -> 1.16x; down 8B M = 64 1.11x -> 1.04x, 128
# 1.23x -> 1.01x; gate_up 8B M = 128 1.18x -> 1.01x, 256 1.13x -> 1.01x. The 1.7B shapes (K = 2048) are
# slower with the deeper pipelines: ``TUNED`` keeps them apart. Two K-tiles a pipeline step (unrolled) was
# slower at every point timed (docs/benchmarks.md, session 16).
# Session 17: grouped M > 256 at 5 stages, the most that fits 216 KiB beside the epilogue tile: o 8B M = 1024
# 1.26x -> 1.19x, 4096 1.32x -> 1.27x; down 8B 1.13x -> 1.12x at both (the same search, same run).
# Session 30: grouped M > 256 the Gluon form (``Launch.sm90``), 5 K slots, persistent; ``matmul_sweep.py sm90``
# against the flat (128, 128, 8, 5) it replaced, bitwise at every point (second call, M = 1024 / 16384): o 8B
# 1.21/1.22x -> 1.04/1.03x cuBLAS, down 8B 1.13/1.15x -> 1.04/1.03x, o 1.7B 1.25/1.39x -> 1.06/1.10x, down 1.7B
# 1.09/1.22x -> 1.01/1.07x; one program a tile 1.09/1.12x, 1.07/1.07x, 1.06/1.23x, 0.99/1.14x. At 384-768 rows
# both grids even. The 1.7B layers keep their 64 x 128 Triton tiles to 512 rows (1.34-1.54x; the Gluon form
# 1.45-1.93x there).
# Session 31: grouped M = 129-256 the Gluon form in 64 x 128 tiles (the consumers splitting the columns), 6 slots,
# persistent (``matmul_sweep.py sm90``, bitwise at every point): o 8B M = 256 1.06x -> 0.98x, down 8B 1.09x -> 1.08x.
# At 128 rows it lost (o 1.14x against the split default's 0.96x).
# Session 33 (``matmul_sweep.py sm90``, each form bitwise the default): grouped M = 257-768 ``Launch.tail`` (the
# rows past the last whole wave of 128-row tiles in 64-row ones): o 8B M = 768 1.23x -> 1.15-1.17x, down 8B
# 1.17x -> 1.10x; below 512 rows (no whole wave) the same launch as before. The 192 x 64 tiles (three consumers)
# stay a candidate: at 384 rows 1.02-1.10x (o) and 1.11x (down) against the tail's 1.08-1.12x and 1.06x, at 320
# 1.42x / 1.27x against 1.22x / 1.21x.
# Session 58/63 (H100): as a layer (the product, then the residual add + RMSNorm) the tail form's second launch
# reads the weight again, which back-to-back products hide in L2: o 8B at 641-768 rows 1.34-1.47x cuBLAS + norm;
# one launch of 128 x 96 tiles 1.18-1.35x, in the H100's packaged launch file (not yet timed on an H200).
LAUNCHES: dict[tuple[str, str], list[tuple[int, Launch]]] = {
    ("plain", "narrow"): [(16, Launch((64, 16, 4, 8), swap=True)),
                          (32, Launch((64, 32, 4, 8), swap=True)),
                          (64, Launch((64, 64, 4, 8))),
                          (128, Launch((64, 128, 4, 8), persistent=False)),
                          (256, Launch((64, 128, 4, 4), persistent=False)),
                          (1024, Launch((128, 128, 4, 4))),
                          (1 << 62, Launch((128, 256, 8, 3)))],
    ("plain", "wide"): [(16, Launch((16, 64, 4, 4), persistent=False)),
                        (64, Launch((64, 128, 4, 4), persistent=False)),
                        (128, Launch((64, 128, 4, 8))),
                        (256, Launch((128, 128, 4, 8))),
                        (1 << 62, Launch((128, 256, 8, 3)))],
    ("groups", "narrow"): [(16, Launch((16, 128, 4, 4), split=1)),
                           (32, Launch((64, 256, 4, 3), split=1)),
                           (64, Launch((64, 64, 4, 6), split=HALF, persistent=False, flat=True)),
                           (128, Launch((64, 128, 4, 6), split=HALF, persistent=False, flat=True)),
                           (256, Launch((64, 128, 12, 6), sm90=True)),
                           (768, Launch((128, 128, 12, 5), sm90=True, tail=True)),
                           (1 << 62, Launch((128, 128, 12, 5), sm90=True))],
}
LAUNCHES["groups", "wide"] = LAUNCHES["groups", "narrow"]  # row-parallel N is the hidden size: not measured wide
# the 64-row tiles that take a ``Launch.tail`` launch's rows past its last whole wave
SM90_TAIL = Launch((64, 128, 12, 6), sm90=True)
# what a table's sm90 launch runs where the Gluon form cannot serve the product (another GPU, fp32 operands, the
# backward's transposed layouts), by K order and tile rows: the Triton form it replaced (``sm90_fallback``). The
# plain ones are not flat: in one K-group the flat 128 x 128 form serializes its wgmmas (ptxas C7515)
SM90_FALLBACKS = {("groups", 128): Launch((128, 128, 8, 5), persistent=False, flat=True),
                  ("groups", 64): Launch((64, 128, 4, 6), persistent=False, flat=True),
                  ("plain", 128): Launch((128, 128, 4, 4)),
                  ("plain", 64): Launch((64, 128, 4, 4), persistent=False)}


def sm90_fallback(launch: Launch, kind: str) -> Launch:
    """``SM90_FALLBACKS``'s launch for a ``Launch.sm90`` of K order ``kind`` ("groups" or "plain"): its tile
    height's (a 192-row tile's: the 128-row one's)."""
    return SM90_FALLBACKS.get((kind, launch.config[0]), SM90_FALLBACKS[kind, 128])

# Per layer shape (K order, N, K), over the table above up to each list's last bound (an entry None: the table's
# launch up to its bound). From the same session-16 search: Qwen3-1.7B's layers (hidden 2048), where the table's
# 8B-shaped choices measured slower. Their decode sizes fill the SMs with more, shallower programs: split per
# group where a tile has few programs, 4 stages.
# Session 17 (search at M = 256-1024): M = 257-512 (o, down) and 513-1024 (o) in 64 x 128 tiles, fused: the
# table's 128 x 128 tiles leave half the SMs idle there (64 tiles at M = 512). qkv 8B M = 161-512 (search at
# 160-512, one run): 192 1.30x -> 1.26x, 256 1.17x -> 1.09x, 384 1.50x -> 1.34x, 512 1.19x -> 1.09x; at 160 the
# table's 64 x 128 tiles stay (1.38x; 128 x 128 tiles, half of them padding, 1.65x).
# Session 41 (``--search --block-k``, every timed launch checked bitwise against the default, the same run): 128-wide
# K loads (``Launch.block_k``) where the weight-streaming small-M launches sat on their ~250 ns-a-K-tile floor: qkv
# 1.7B 1.41/1.58/1.57/1.39/1.17x -> 1.09/1.20/1.13/1.03/0.94x cuBLAS at 1/16/32/64/128 rows, qkv 8B 1.09/1.21/1.16/
# 1.10x -> 0.97/0.98/0.98/1.02x at 1/16/32/64 (at 128: 1.14x -> 1.10x, kept), gate_up 1.7B 1.11/1.16x -> 0.90/0.97x at
# 1/16, o 1.7B 1.15/1.26/1.24x -> 1.18/1.09/1.12x at 1/16/64 (at 1 row 0.1 us slower: one launch serves 1-16), down
# 1.7B 0.89/0.93x -> 0.86/0.88x at 1/16. gate_up 8B (1.00-1.03x) and gate_up 1.7B at 64 rows (0.99x) gained under 3%:
# kept (docs/benchmarks.md, session 41)
# Session 42 (the same search with 64-, 128- and 256-wide loads; 256-wide proven bitwise on the H200 first): qkv
# 1.7B 256-wide, swap to 64 rows, 1.10/1.21/1.13/1.06x -> 1.06/1.03/1.05/0.94x at 1/16/32/64 rows; o 1.7B 1.50x ->
# 1.12x at 32, 1.30x -> 1.14x at 128, 1.54x -> 1.27x at 256; down 1.7B 0.88x -> 0.82x at 128, 1.07x -> 1.00x at 256;
# gate_up 1.7B 1.20x -> 1.11x at 256. Under 4% kept: o 1.7B at 1 and 64 rows (256-wide), qkv 8B at 128 (1.11x ->
# 1.08x), gate_up 1.7B at 128
TUNED: dict[tuple[str, int, int], list[tuple[int, Launch | None]]] = {
    ("plain", 6144, 4096): [(16, Launch((64, 16, 4, 6), swap=True, block_k=128)),
                            (32, Launch((64, 32, 4, 6), swap=True, block_k=128)),
                            (64, Launch((64, 64, 4, 8), persistent=False, block_k=128)),
                            (160, None),
                            (256, Launch((128, 128, 4, 5))),
                            # session 33, by tiles a wave: 257-320 rows are 5 of 64 (240 tiles of 64 x 128: 1.27x
                            # -> 0.92x at 320), 321-384 two of 192 (96 tiles; the Gluon form in one K-group, three
                            # consumers: 1.33x -> 1.13x at 384)
                            (320, Launch((64, 128, 4, 4), persistent=False)),
                            # session 51 (H100, launch file proven and timed in one call): 192 x 96 tiles, 128 of
                            # them one wave (192 x 128: 96 tiles): 1.19x -> 1.11x at 384; session 53 (another H100,
                            # the same file back): 38.0 -> 35.1 us at 384, 37.5 -> 36.3 at 321 (not yet timed on an
                            # H200)
                            (384, Launch((192, 96, 12, 5), sm90=True)),
                            # session 50 (H200, launch file proven and timed in one call): the Gluon form's
                            # 192-column tiles, 128 tiles a wave of 132 SMs -- 385-512 rows in 128 x 192 (1.15x ->
                            # 0.94x at 512; Triton 128 x 256, one program a tile, 96 tiles), 641-768 in 192 x 192
                            # (1.24x -> 1.09x at 768)
                            (512, Launch((128, 192, 12, 4), sm90=True)),
                            # the Gluon form, 128 x 256 with its tail (640 rows of them are one wave): 1.31x ->
                            # 1.21x at 768, 0.98x at 640 (session 33)
                            (640, Launch((128, 256, 12, 3), sm90=True, tail=True)),
                            (768, Launch((192, 192, 12, 3), sm90=True))],
    # gate_up 8B, session 44 (launch file, proven and timed in one call): 17-32 rows swap, 256-wide 1.12x -> 1.02x;
    # 129-192 64 x 128, 128-wide 1.30x -> 1.18x (the Gluon form keeps 193-256: 1.00-1.02x at 256); session 50 (H200,
    # the same): 161-192 the Gluon form's 192 x 192 tiles, 128 of them, one wave: 1.26x -> 1.11x at 192 (129-160 keep
    # 64 x 128: 192 x 192 would pad a third of their rows, not timed)
    ("plain", 24576, 4096): [(16, None),
                             (32, Launch((64, 32, 4, 8), swap=True, block_k=256)),
                             (128, None),
                             (160, Launch((64, 128, 4, 4), block_k=128)),
                             (192, Launch((192, 192, 12, 3), sm90=True)),
                             # the Gluon form in one K-group (session 33), 128 x 128 tiles: 1.43x -> 1.28x at 192 rows
                             (256, Launch((128, 128, 12, 5), sm90=True)),
                             # 192 x 128 (three consumers) where it fills its waves: 1.21x -> 1.04-1.05x at 384,
                             # 1.06x -> 1.01x at 768; at 448-640 rows the table's 128 x 256 (0.96-1.00x; 192 x 128
                             # 1.11-1.19x)
                             (384, Launch((192, 128, 12, 4), sm90=True)),
                             (640, None),
                             (768, Launch((192, 128, 12, 4), sm90=True))],
    # qkv (session 41, above; session 42: 256-wide loads, swap to 64 rows)
    ("plain", 4096, 2048): [(16, Launch((64, 16, 4, 6), swap=True, block_k=256)),  # 5 deep at 256 wide (fitted)
                            (64, Launch((64, 32, 4, 4), swap=True, block_k=256)),
                            (128, Launch((64, 64, 4, 4), persistent=False, block_k=128)),
                            # session 34 (``matmul_sweep.py sm90``, two calls): 129-256 the table's 64 x 128 tiles,
                            # one program a tile (session 14's 128 x 64 persistent: 1.59x -> 1.01-1.13x at 192,
                            # 1.17x -> 1.15-1.20x at 256); 513-768 rows are 3-4 of 192 (96-128 tiles of 192 x 128
                            # on 132 SMs: 1.62x -> 1.22x at 576, 1.21x -> 0.99-1.02x at 768)
                            # session 44 (launch file): 193-256 64 x 128, 128-wide, persistent 1.14x -> 0.99x;
                            # session 45 (launch file): 129-192 the same tiles, 4 stages, 1.08x -> 0.96x at 192
                            (192, Launch((64, 128, 4, 4), block_k=128)),
                            (256, Launch((64, 128, 4, 6), block_k=128)),
                            (512, None),
                            (768, Launch((192, 128, 12, 4), sm90=True))],
    ("plain", 12288, 2048): [(16, Launch((128, 16, 4, 4), swap=True, block_k=128)),  # gate_up (session 41)
                             (64, Launch((64, 128, 4, 6))),  # 1.13x -> 0.98x
                             (128, Launch((128, 128, 4, 6), persistent=False)),  # 1.18x -> 1.05x
                             # session 34: the Gluon forms by tile count (96 tiles a row of 192 x 128, 48 of
                             # 128 x 256), each from the first call's sweep, checked in the second: 192 x 128 where
                             # whole tiles cover the rows (1.46x -> 1.17-1.24x at 192, 1.48x -> 1.20x at 384, 1.22x
                             # -> 1.00-1.03x at 768), 64 x 256 at 320 (240 tiles: 1.22x -> 1.08x), 128 x 128 at
                             # 385-512 (1.17/1.13x -> 0.98/0.97x at 448/512), 128 x 256 at 513-640 (1.06/1.15x ->
                             # 1.00/0.99x at 576/640)
                             # session 51 (H100, launch file): 192 x 96, 128 tiles, one wave (192 x 128: 96
                             # tiles): 1.12x -> 1.05x at 192; session 53 (another H100): 26.2 -> 24.9 us at 192,
                             # 25.8 -> 27.3 at 129, both inside that call's 1.3 us spread (not yet timed on an H200,
                             # where 192 x 128 was 1.24x)
                             (192, Launch((192, 96, 12, 5), sm90=True)),
                             # 1.34x -> 1.17x (session 34); 64 x 128, 128-wide loads 1.20x -> 1.11x (42)
                             (256, Launch((64, 128, 4, 4), block_k=128)),
                             (320, Launch((64, 256, 12, 4), sm90=True)),
                             # session 50 (H200, launch file): 192 x 192, 128 tiles, one wave (192 x 128: 192 tiles,
                             # 1.45 waves): 1.22x -> 1.10x at 384
                             (384, Launch((192, 192, 12, 3), sm90=True)),
                             (512, Launch((128, 128, 12, 5), sm90=True)),
                             (640, Launch((128, 256, 12, 3), sm90=True)),
                             (768, Launch((192, 128, 12, 4), sm90=True))],
    ("groups", 2048, 2048): [(16, Launch((16, 128, 4, 4), split=1, block_k=128)),  # o (session 41)
                             # 17-32 rows: 16 x 64 tiles, 256-wide loads 1.50x -> 1.12x (session 42)
                             (32, Launch((16, 64, 4, 4), split=HALF, persistent=False, flat=True, block_k=256)),
                             # 1.40x -> 1.23x (session 16), by halves, flat, 128-wide loads 1.24x -> 1.12x (41)
                             (64, Launch((64, 32, 4, 4), split=HALF, persistent=False, flat=True, block_k=128)),
                             # session 42, 128-wide loads: 1.30x -> 1.14x at 128; fused, 1.54x -> 1.27x at 256
                             (128, Launch((64, 64, 4, 4), split=HALF, persistent=False, flat=True, block_k=128)),
                             (256, Launch((64, 64, 4, 4), persistent=False, flat=True, block_k=128)),
                             # 512: Triton 64 x 128 1.98x -> 1.33x (session 17), the Gluon form in 64 x 128 tiles
                             # 1.50/1.37x -> 1.36/1.21x at 384/512 (session 31); above, its 128-row tiles
                             (512, Launch((64, 128, 12, 6), sm90=True)),
                             # session 54 (H100, launch files proven and timed, two calls): 768 rows in 128 x 96
                             # tiles in K-groups, 6 x 22 = 132 tiles, one wave (128 x 128: 96), cuBLAS's pick there:
                             # 13.6 -> 12.5 us, 1.12x -> 1.04x, and 13.7 -> 12.7 us; at 641 rows (the sixth row of
                             # tiles one row full) slower, 13.6 -> 14.9 us: 768 alone (a CUDA graph's 753-768
                             # sequences run as 768 rows; not yet timed on an H200: 1.35x in s50)
                             (767, None),
                             (768, Launch((128, 96, 12, 6), sm90=True))],
    ("groups", 2048, 6144): [(16, Launch((16, 128, 4, 4), split=1, block_k=128)),  # down (session 41)
                             (64, Launch((64, 128, 4, 4), split=1)),  # 1.10x -> 0.91x
                             # 1.10x -> 0.89x (session 16); flat 64 x 64 by halves, 128-wide loads 0.88x -> 0.82x (42)
                             (128, Launch((64, 64, 4, 6), split=HALF, persistent=False, flat=True, block_k=128)),
                             # 1.22x -> 1.13x (session 16); fused 64 x 64, 128-wide loads 1.07x -> 1.00x (42)
                             (256, Launch((64, 64, 4, 6), persistent=False, flat=True, block_k=128)),
                             # 512: Triton 64 x 128 1.61x -> 1.09x (session 17); the Gluon form in 64 x 128
                             # tiles 1.11/1.16x -> 1.03/0.99x at 384/512 (session 31)
                             (512, Launch((64, 128, 12, 6), sm90=True)),
                             # session 54 (H100, as o 1.7B's): 128 x 96 tiles, 132 a wave, 36.1 -> 33.9 us and
                             # 36.2 -> 32.7 us at 768 rows (0.99x -> 0.90-0.94x); at 641 33.3 -> 34.1 us: 768 alone
                             (767, None),
                             (768, Launch((128, 96, 12, 6), sm90=True))],
    # session 44 (``matmul_sweep.py --search --retime --write-launches``, then the launch file proven by the table-edges
    # test and timed against cuBLAS in one call, before -> after in that call): o 8B 33-64 rows by halves, flat,
    # 256-wide 1.37x -> 1.20x at 64; 193-256 flat 64 x 128, 128-wide 1.13x -> 1.06x at 256 (the Gluon 64 x 128 keeps
    # 129-192: 0.89-0.90x at 192)
    ("groups", 4096, 4096): [(32, None),
                             (64, Launch((64, 64, 4, 4), split=HALF, persistent=False, flat=True, block_k=256)),
                             (192, None),
                             (256, Launch((64, 128, 4, 4), persistent=False, flat=True, block_k=128))],
    # down 8B, the same: 193-256 flat 64 x 128, 128-wide, 8 stages 1.10x -> 1.00x at 256; session 54 (H100, launch
    # files proven and timed, two calls): 384 rows in the Gluon form's 128 x 96 tiles in K-groups, 3 x 43 = 129
    # tiles, one wave (128 x 128: 96), 72.0 -> 68.2 us (0.98x -> 0.93x) and 71.6 -> 68.4 us; at 257 rows the same
    # 129 tiles ran 85.9 us against 68.8 for 128 x 128 (retimed, 5 rounds): 384 alone (a CUDA graph's 377-384
    # sequences run as 384 rows; not yet timed on an H200)
    ("groups", 4096, 12288): [(192, None),
                              (256, Launch((64, 128, 4, 8), persistent=False, flat=True, block_k=128)),
                              (383, None),
                              (384, Launch((128, 96, 12, 6), sm90=True))],
    # the plain lm_head matmul, the same: 129-192 the Gluon form's 192 x 128 tiles (three consumers; the table's
    # 128 x 128 ran half its second row of tiles as padding) 1.59x -> 1.01x at 192
    ("plain", 151936, 4096): [(128, None),
                              (192, Launch((192, 128, 12, 4), sm90=True))],
}

# ``Launch.sm90``'s forms, config (128 or 64, BLOCK_N, warps ignored, K slots), one program a tile or persistent, each
# built for sm_90 on the CPU (gluon_sass.py), timed by ``matmul_sweep.py sm90`` and proved bitwise by tests/gpu.
# Session 30 (sweeps at M = 384-16384, o and down, 8B and 1.7B): 4 slots up to 1.12x slower than 5 (faster, by
# <= 2%, only at o 1.7B), 128 x 64 tiles at 6 slots 1.17-1.33x slower than the default: dropped. One program a tile
# stays a candidate (the same kernel; within 1% of persistent at 384-512 rows, 1.07-1.11x slower at 16384).
# Session 31: 64-row tiles, the consumers splitting the columns, for M = 128-768, where 128-row tiles leave SMs idle
# or run 1.45 waves (M = 768 at 8B: 192 tiles on 132 SMs). 64 x 128 (m64n64k16 dots, 6 slots, persistent) won at
# 129-256 rows (8B) and 257-512 (1.7B), lost at 128 and 768 (``matmul_sweep.py sm90``, second call). 64 x 256
# (m64n128k16, 4 slots: 5 pass the 227 KiB) never beat the better of the other two by more than 0.3%: dropped
# Session 31 (CPU, not yet timed): ``Launch.tail``, the last partial wave of 128-row tiles in 64-row ones (at 8B,
# M = 768: a wave of 128-row tiles took 26.3 us at 512 rows and one of 64-row tiles 16.5 us at 256, so ~43 us
# against 47.7 us in 1.45 waves; cuBLAS 39.6)
# Session 32: 192 x 64 tiles, three consumers (at 8B, M = 768: 256 tiles in 1.94 waves, none padding, against 192
# 128 x 128 tiles in 1.45); session 33: launchable at 128 registers a thread (16 warps)
# Session 34: 64 x 64 tiles (m64n32k16 dots, 6 slots: 168 registers, no spill), twice the 64 x 128 tiles' count
# where N is narrow; session 35: bitwise (o, down), but 0.97-2.10x the default at o/down 1.7B and 8B, 128-768 rows,
# under it only at o 1.7B, 256 rows (1.51 against 1.56x cuBLAS: noise): dropped (commit 612b6d9 has it)
# Session 44: 192 x 128 tiles in K-groups, the three consumers' first-half sums parked in fp32 shared memory (two
# fp32 tiles a thread, not three; 3 K slots beside them), with and without ``tail``: bitwise (tests/gpu, o and down)
# but 1.07-1.55x the default's time at o/down, 8B and 1.7B, 1024-16384 rows (o 8B at 16384: 1.174x cuBLAS against
# 1.061x), level only at down 8B, 768 rows (1.109x against 1.122x): dropped (commit b0bd2b9 has it)
# Session 54 (H100): 128 x 96 tiles in K-groups (``matmul_sm90.GROUPED_WIDE``: a consumer's 64 + 32 columns, three
# fp32 tiles each), where 128 x 128 tiles leave a quarter of the SMs idle and cuBLAS runs 128 x 96: o/down 8B at 384
# rows (129 tiles against 96) and o/down 1.7B at 768 (132 against 96). Bitwise (tests/gpu: 8, 4 and 2 groups); faster
# where the rows fill the tiles (``TUNED``: o 1.7B 1.12x -> 1.04x at 768, down 1.7B and down 8B at 384 5-10%), slower
# at 257 and 641 rows (the last row of tiles nearly empty: down 8B 85.9 against 68.8 us), level at o 8B's 384 / 768
# Session 55: 64 x 96 tiles split by columns (``GROUPED_WIDE``: a consumer's 32 + 16), 110 tiles at the 1.7B layers'
# 257-320 rows where 64 x 128 make 80 (o / down 1.7B at 257 rows: 1.37 / 1.52x cuBLAS on the H100, cuBLAS's 64 x 88
# tiles 120), 129 at the 8B layers' 129-192. Session 56 (H100): bitwise in 8, 4 and 2 K-groups, and the fastest form
# at none of o/down 8B and 1.7B's 192 / 257 / 320 rows, nor qkv 8B's 128 / 192 in one group
SM90_CANDIDATES = [Launch((128, 128, 12, 5), sm90=True), Launch((128, 128, 12, 5), persistent=False, sm90=True),
                   SM90_TAIL, Launch((128, 128, 12, 5), sm90=True, tail=True), Launch((192, 64, 12, 6), sm90=True),
                   Launch((128, 96, 12, 6), sm90=True), Launch((64, 96, 12, 6), sm90=True)]
# Session 32 (CPU, not yet timed): the plain layers (qkv, gate_up, the head's matmul) in the same kernel, one K-group,
# where the Triton tiles measured 1.17-1.60x cuBLAS at 192-768 rows (session 31's table): the grouped forms, and
# the tiles one group frees registers for -- 128 x 256 (cuBLAS's; m64n256k16, 3 slots: 208 KiB), 64 x 256 split
# by columns (m64n128k16, 4 slots) and 192 x 128 (three consumers, 4 slots: gate_up 8B at 384 rows 384 tiles in
# 2.9 waves, against 288 of 128 x 256 in 2.2) -- built for sm_90 without a spill (gluon_sass.py)
# Session 50: 192-column tiles (``matmul_sm90.wide``: a consumer's 128 + 64 columns, two dots a K step), 192 x 192 (3
# slots) and 128 x 192 (4 slots) where 128 of them fill one wave of 132 SMs. H200, searched against each point's
# default (``--tiles 128x192,192x192``, retimed), then proven and timed as a launch file: qkv 8B 1.15x -> 0.94x at
# 512 rows (128 x 192), 1.24x -> 1.09x at 768 (192 x 192); gate_up 8B 1.26x -> 1.11x at 192; gate_up 1.7B 1.22x
# -> 1.10x at 384 (``TUNED``). No gain at gate_up 8B's 128 rows or gate_up 1.7B's 256 (1.13-1.14x either way).
# Session 51 (H100; the same search, ``--tiles 128x96,192x96`` at 192 and 384 rows, then the launch file proven and
# timed): 96-column ones, 128 x 96 (6 slots) and 192 x 96 (5), 128 tiles where 128- or 192-row tiles of 128 columns
# make 96: 192 x 96 won at qkv 8B's 384 rows (1.19x -> 1.11x) and gate_up 1.7B's 192 (1.12x -> 1.05x) (``TUNED``);
# 128 x 96 gained nothing at qkv 8B's 192 rows (1.28x -> 1.27x) and lost at qkv 1.7B's (0.85x -> 1.31x), tied at 384
# (128 x 96 is in ``SM90_CANDIDATES`` since session 54, the grouped form's too)
SM90_PLAIN_CANDIDATES = [*SM90_CANDIDATES, Launch((128, 256, 12, 3), sm90=True),
                         Launch((128, 256, 12, 3), persistent=False, sm90=True),
                         Launch((128, 256, 12, 3), sm90=True, tail=True), Launch((64, 256, 12, 4), sm90=True),
                         Launch((192, 128, 12, 4), sm90=True), Launch((128, 192, 12, 4), sm90=True),
                         Launch((192, 192, 12, 3), sm90=True), Launch((192, 96, 12, 5), sm90=True)]

# The tuning space the H200 sweep times; tests/gpu proves every one gives the default's bits.
CANDIDATE_CONFIGS = sorted({(sm90_fallback(lc, kind) if lc.sm90 else lc).config
                            for (kind, *_), table in (*LAUNCHES.items(), *TUNED.items()) for _, lc in table if lc} | {
    (16, 32, 4, 4), (16, 64, 4, 4), (16, 128, 4, 4), (32, 64, 4, 4), (64, 64, 4, 4), (64, 128, 4, 4),
    (64, 256, 4, 3), (128, 64, 4, 4), (128, 128, 4, 4), (128, 128, 8, 4), (128, 256, 8, 3), (256, 128, 8, 3),
    # deeper pipelines for the weight-streaming small-M plain layers
    (16, 32, 4, 8), (16, 64, 4, 6), (32, 64, 4, 6),
    # swap launches (weight rows, tokens): the wgmma's 64/128-row side on the weight, as cuBLAS's 64x8 and
    # 128x8 small-M tiles
    (64, 16, 4, 6), (128, 16, 4, 4), (128, 16, 4, 6), (128, 32, 4, 4), (64, 32, 4, 6),
    # narrow weight tiles on 2 warps: N / 16 programs, so a plain-K layer with N = 4096 (qkv at 1.7B: 1.5-1.7x
    # at M <= 64 with the 64 programs of the swap launch) streams its weight on every SM; the BM = 16 tiles'
    # mma.sync (HMMA in their SASS; BM >= 64: HGMMA) has given the wgmma tiles' bits in every contract test
    # of the 16-row candidates so far, and that test proves each new one before the sweep may pick it
    (16, 16, 2, 8), (16, 32, 2, 8), (32, 32, 2, 6)})


def launch_for(m: int, n: int, groups: int, k: int) -> Launch:
    """The default launch of an [M, K] x [N, K] product in ``groups`` K-groups: a launch file's for its shape and M
    (``use_launches``), else the GPU's own file's (``use_device_launches``), else ``TUNED``'s where it names one for
    M, else the table of its K order and width."""
    kind = "groups" if groups > 1 else "plain"
    for table in (FILE_LAUNCHES, DEVICE_LAUNCHES):
        for lo, hi, lc in table.get((kind, n, k), ()):
            if lo <= m <= hi:
                return lc
    tuned = next((lc for bound, lc in TUNED.get((kind, n, k), ()) if m <= bound), None)
    if tuned is not None:
        return tuned
    return next(lc for bound, lc in LAUNCHES[(kind, "narrow" if n <= 8192 else "wide")] if m <= bound)


# Launch files (``use_launches``): launches measured on the GPU at hand for the shapes of the model at hand, over
# ``TUNED`` and the tables, by (K order, N, K) and rows lo..hi. A launch never changes the bits, so a file changes
# the speed only, and it may name only the forms tests/gpu proves (``launch_problem``). Written by
# ``benchmarks/triton/matmul_sweep.py --search --retime K --write-launches PATH`` (``save_launches``)
LAUNCH_FILE_FORMAT = "rlk-matmul-launches/1"
LAUNCH_FILE_ENV = "RLK_MATMUL_LAUNCHES"  # read at import: a file every process of a run (vLLM's workers too) uses
FILE_LAUNCHES: dict[tuple[str, int, int], list[tuple[int, int, Launch]]] = {}
# A GPU model's own launch file, shipped in the package (``launches/<device name>.json``, the name as
# ``torch.cuda.get_device_name`` gives it with spaces as underscores; vLLM ships its fused-MoE configs the same way):
# launches measured on that GPU only, over ``TUNED`` (which is tuned on the H200, with rows measured on the H100 where
# the H200 was not lent) and under a user's file. ``mm`` loads it on its first product on a CUDA device
# (``use_device_launches``): one GPU model a process, as vLLM's workers and a training process run.
DEVICE_LAUNCH_DIR = Path(__file__).with_name("launches")
DEVICE_LAUNCHES: dict[tuple[str, int, int], list[tuple[int, int, Launch]]] = {}
_device_name: list[str | None] = [None]  # whose file DEVICE_LAUNCHES holds (None: not yet looked up)


def wave_rows(m: int, n: int, config: tuple[int, int, int, int], sms: int) -> int:
    """The rows a ``Launch.tail`` launch runs in its own tiles (config's BLOCK_M x BLOCK_N): whole waves of them
    over ``sms`` SMs, when the rest fit one wave of ``SM90_TAIL``'s tiles; else all ``m``."""
    per_wave = sms // cdiv(n, config[1]) * config[0]
    head = m // per_wave * per_wave if per_wave else m
    tail_bm, tail_bn = SM90_TAIL.config[:2]
    if head == m or cdiv(m - head, tail_bm) * cdiv(n, tail_bn) > sms:
        return m
    return head


def fitted_config(config: tuple[int, int, int, int], elem_size: int, out_elem_size: int, accumulate: bool = False,
                  explicit: bool = False, block_k: int = BLOCK_K) -> tuple[int, int, int, int]:
    """The (BLOCK_M, BLOCK_N, warps, stages) a launch's config runs with (``mm``; matmul_sass.py compiles the
    same): its pipeline depth cut to fit shared memory beside the epilogue tile (``out_elem_size``: 4 for a
    split launch's fp32 partials; ``block_k``: the K-tile load, ``Launch.block_k``), and a default whose
    epilogue tile would pass 64 KiB replaced."""
    bm, bn, warps, stages = config
    # epilogue shared memory: the store's staging tile, and with accumulate as much again (the compiler converts
    # the pointer-loaded tile of out through shared memory; the H200 found 256 KiB asked of 227 at 128 x 128)
    epilogue = out_elem_size * (2 if accumulate else 1)
    if bm * bn * epilogue > 64 * 1024 and not explicit:  # a big fp32 epilogue tile would starve the pipeline
        bm, bn, warps, stages = (128, 64, 4, 4) if accumulate else (128, 128, 8, 4)
    return bm, bn, warps, fit_stages(bm + bn, elem_size, stages, bm * bn * epilogue, block_k=block_k)


def _block_k(launch: Launch, gpu_tma: bool, kg: int, grouped: bool, explicit: bool) -> int:
    """The K-tile load a launch runs with (``Launch.block_k``) where it can: a multiple of BLOCK_K, whole loads a
    K-group, on the GPU's TMA kernel. Elsewhere BLOCK_K, or, for a launch asked for by name, a ValueError saying
    which of those it lacks."""
    bk = launch.block_k
    if bk == BLOCK_K:  # every launch but the wide-load ones: nothing to check on mm's path
        return bk
    why = ("a multiple of BLOCK_K" if bk < BLOCK_K or bk % BLOCK_K else
           f"K-groups of whole loads (a group here is {kg} long)" if grouped and kg % bk else
           "the TMA kernel on a GPU (under the interpreter one dot is one numpy product, whose bits two dots over "
           "its halves need not give)" if not gpu_tma else "")
    if not why:
        return bk
    if explicit:
        raise ValueError(f"matmul: Launch.block_k={bk} needs {why}")
    return BLOCK_K


def split_of(launch: Launch, groups: int, m: int, n: int) -> int:
    """The groups a split program of ``launch`` folds (``Launch.split``: 1 or ``HALF``), 0 where it runs fused."""
    # a split program folds one group or one whole half: the fused order's pieces (a run of 2 would
    # give (p0 + p1) + (p2 + p3) where the fold computes ((p0 + p1) + p2) + p3); int32 buffer offsets
    # (and whole pieces: a split by halves of fewer than 4 groups, e.g. a probe's 2, runs fused)
    return (int(launch.split) if groups > 1 and launch.split in (1, HALF) and groups % launch.split == 0
            and groups * m * n < 2 ** 31 else 0)


def tile_grid(launch: Launch, split: int, m: int, n: int, bm: int, bn: int, sms: int) -> tuple[int, int, bool]:
    """(tiles, programs along axis 0, persistent) of a Triton launch of bm x bn tiles over m x n (a swap launch's
    m and n already exchanged): persistent, one program an SM walking the tiles, else one a tile (a split launch has
    as many again along axis 1, one a part)."""
    tiles = cdiv(m, bm) * cdiv(n, bn)
    persistent = launch.persistent and not split and not launch.flat  # flat: a tile each
    return tiles, min(sms, tiles) if persistent else tiles, persistent


def sm90_serves(launch: Launch, groups: int, k: int) -> bool:
    """Whether the Gluon form (``Launch.sm90``) has a form for ``launch``'s tiles in ``groups`` K-groups of a K of
    ``k`` (whole 64-wide K-tiles a group; a tail after 128-row tiles only); ``mm`` asks besides for forward layouts,
    no accumulate, an sm_90 GPU and TMA-addressable bf16/fp16 operands, else runs ``sm90_fallback``."""
    return (k % (groups * BLOCK_K) == 0 and matmul_sm90.serves_tile(*launch.config[:2], plain=groups == 1)
            and (not launch.tail or launch.config[0] == 2 * matmul_sm90.HALF))


class Grid(NamedTuple):
    """One kernel launch of a forward product as ``mm`` runs it on an sm_90 GPU (``grids``)."""

    rows: int  # the product's rows it covers
    form: str  # "gluon" (``matmul_sm90``), "triton" or "fold" (a split launch's fold of its fp32 partials)
    tile: tuple[int, int]  # (rows, columns) of the product a tile covers (a swap launch's: its tokens x weight rows)
    tiles: int  # over every part (a split launch's tiles times its parts)
    programs: int  # over every part


def grids(m: int, n: int, k: int, groups: int, launch: Launch | None = None, sms: int = 132) -> list[Grid]:
    """The kernels ``mm`` launches for a forward bf16 product [M, K] x [N, K] in ``groups`` K-groups on an sm_90
    GPU of ``sms`` SMs (the default launch for M, or ``launch``), with their tiles and programs: what a benchmark's
    ratio is read against (a wave is ``sms`` programs; ``matmul_sweep.py explain``). A split launch's fold kernel
    is listed too (in a model's forward ``linear_unfolded`` leaves it to the next op)."""
    launch = launch or launch_for(m, n, groups, k)
    if launch.sm90 and not sm90_serves(launch, groups, k):
        launch = sm90_fallback(launch, "groups" if groups > 1 else "plain")
    if launch.sm90:
        head = wave_rows(m, n, launch.config, sms) if launch.tail else m
        out = []
        for rows, lc in ((head, launch), (m - head, SM90_TAIL)):
            if rows:
                bm, bn = lc.config[:2]
                tiles = cdiv(rows, bm) * cdiv(n, bn)
                out.append(Grid(rows, "gluon", (bm, bn), tiles, min(tiles, sms) if lc.persistent else tiles))
        return out
    split = split_of(launch, groups, m, n)
    bm, bn, _, _ = fitted_config(launch.config, 2, 4 if split else 2, block_k=launch.block_k)
    pm, pn = (n, m) if launch.swap else (m, n)
    tiles, progs, _ = tile_grid(launch, split, pm, pn, bm, bn, sms)
    parts = groups // split if split else 1
    tile = (bn, bm) if launch.swap else (bm, bn)
    out = [Grid(m, "triton", tile, tiles * parts, progs * parts)]
    if split:
        (rows, blocks), block = fold_grid(m, n)
        out.append(Grid(m, "fold", (1, block), rows * blocks, rows * blocks))
    return out


def mm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
       a_km: bool = False, b_kn: bool = False, groups: int = 1, launch: Launch | None = None,
       tma: bool | None = None, out: torch.Tensor | None = None, accumulate: bool = False,
       fold: bool = True) -> torch.Tensor | Partials:
    """The contract's product C[M, N] = A @ B^T over K, with A given as [M, K] (``a_km``: as
    [K, M]) and B as [N, K] (``b_kn``: as [K, N]), K reduced in ``groups`` canonical groups (1:
    the plain K order). ``launch``/``tma`` override the choices made by shape (every choice gives
    the same bits); ``out`` (contiguous [M, N]) receives the result -- with ``accumulate``, ``out
    + C`` rounded once to out's dtype, the bits of ``out + mm(...)`` in fp32 (plain K, no bias), one
    pass over ``out`` instead of a product buffer and an add. Groups of a K that is not a multiple of
    ``groups`` x ``BLOCK_K`` (no layer's: ``k_groups``; a backward's split of a long K, whose order only
    needs to be fixed) take ceil(K-tiles / groups) K-tiles each, the last ones fewer or none. ``fold=False``: where
    the launch splits K, the fp32 partials as ``Partials`` (the fold left to the next op) instead of ``out``."""
    m, k = (a.shape[1], a.shape[0]) if a_km else a.shape
    n = b.shape[1] if b_kn else b.shape[0]
    if (b.shape[0] if b_kn else b.shape[1]) != k:
        raise ValueError(f"matmul: A {tuple(a.shape)} and B {tuple(b.shape)} disagree on K")
    if accumulate and (out is None or out.dtype != torch.float32 or groups > 1 or bias is not None):
        raise ValueError("matmul: accumulate=True adds a plain-K product without bias into a given fp32 out")
    if out is None:
        out = torch.empty(m, n, dtype=out_dtype or a.dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    if a.is_cuda and _device_name[0] is None:  # the GPU's own launch file, once a process (a dict lookup after)
        use_device_launches(torch.cuda.get_device_name(a.device))
    p = _plan(m, n, k, groups, launch, tma, a_km, b_kn, accumulate, a.dtype, out.dtype, a.is_cuda,
              matmul_sm90.usable(a, b, out), tma_ok(a, b, out), num_sms(a.device), _tables_version[0])
    if p.sm90:
        bind_cuda_context(a.device)
        for lo, hi, (bm, bn, _, num_buf), block_k, persistent in p.segments:  # rows lo..hi-1 in these tiles
            matmul_sm90.launch(a[lo:hi], b, out[lo:hi], bias, groups, run_of(groups), bm, bn, num_buf, block_k,
                               persistent)
        return out
    if p.swap:  # the tiles of B @ A^T: B's rows on the kernel's M side, each tile stored transposed into out
        a, b, m, n = b, a, n, m
    bm, bn, bk = p.bm, p.bn, p.bk
    c = torch.empty(p.parts, m, n, dtype=torch.float32, device=a.device) if p.split else out
    bias_arg = bias if bias is not None else out  # without a bias: out (the accumulate epilogue reads it there)
    if p.use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        bind_cuda_context(a.device)
        a_d = TensorDescriptor.from_tensor(a, [bk, bm] if a_km else [bm, bk])
        b_d = TensorDescriptor.from_tensor(b, [bk, bn] if b_kn else [bn, bk])
        c_d = TensorDescriptor.from_tensor(c, [1, bm, bn] if p.split else [bn, bm] if p.swap else [bm, bn])
        _mm_tma_kernel[p.grid](a_d, b_d, c_d, bias_arg, m, n, k, p.kg, bias is not None, groups, run_of(groups),
                               p.split, a_km, b_kn, bm, bn, bk, 8, p.stride, num_warps=p.warps,
                               num_stages=p.stages, C_T=p.swap, FLAT=p.flat, ACC=accumulate)
    else:
        sam, sak = (a.stride(1), a.stride(0)) if a_km else (a.stride(0), a.stride(1))
        sbn, sbk = (b.stride(1), b.stride(0)) if b_kn else (b.stride(0), b.stride(1))
        scm, scn = (1, m) if p.swap else (n, 1)  # out is [M, N] of the caller: transposed when swapped
        _mm_kernel[p.grid](a, b, c, bias_arg, m, n, k, p.kg, sam, sak, sbn, sbk, scm, scn, bias is not None, groups,
                           run_of(groups), p.split, bm, bn, BLOCK_K, 8, p.stride, num_warps=p.warps,
                           num_stages=p.stages, C_T=p.swap, ACC=accumulate)
    if p.split:  # the runs' partials, folded as the fused kernel folds the groups (or by the next op)
        run = run_of(groups) // p.split
        if not fold:
            return Partials(c, bias, out.dtype, run)
        fold_partials(c, out, bias, p.parts, run)
    return out


class _Plan(NamedTuple):
    """What ``mm`` launches for a product, decided by ``_plan`` from its shape and operands' kind alone."""

    sm90: bool
    segments: tuple = ()  # sm90: (lo, hi, config, block_k, persistent) of each launch, its rows lo..hi-1
    swap: bool = False
    split: int = 0
    parts: int = 0
    kg: int = 0
    use_tma: bool = False
    bm: int = 0
    bn: int = 0
    bk: int = 0
    warps: int = 0
    stages: int = 0
    stride: int = 0
    grid: tuple = ()
    flat: bool = False


# bumped when a launch file comes into use (use_launches, use_device_launches): a plan made before is not reused
_tables_version = [0]


@functools.lru_cache(maxsize=8192)
def _plan(m: int, n: int, k: int, groups: int, launch: Launch | None, tma: bool | None, a_km: bool, b_kn: bool,
          accumulate: bool, dtype: torch.dtype, out_dtype: torch.dtype, is_cuda: bool, sm90_ok: bool, tma_fits: bool,
          sms: int, tables: int) -> _Plan:
    """``mm``'s launch for an [M, K] x [N, K] product in ``groups`` K-groups (``launch``: one asked for by name, else
    ``launch_for``'s) on operands of ``dtype`` into an output of ``out_dtype``: which kernel, tiles, split and
    grid, every check an explicit launch must pass raising here. A function of its arguments only (``sm90_ok``:
    ``matmul_sm90.usable`` of the operands; ``tma_fits``: ``tma_ok`` of them; ``tables``: ``_tables_version``), so
    made once a shape: the host's time per product is the launch's, not this decision's again (each launch of a
    layer asks the same question every step)."""
    explicit = launch is not None
    elem, out_elem = dtype.itemsize, out_dtype.itemsize
    launch = launch or launch_for(m, n, groups, k)
    if launch.tail and not launch.sm90:
        raise ValueError(f"matmul: Launch.tail is a form of the sm90 launch ({launch})")
    if launch.sm90:  # the Gluon form's K slots, block_k wide: whole slots a K-group (one K-group too: its loop
        # takes K // block_k steps), whether it runs here is asked below; then two slots beside the output's staging
        # tiles (the ring of one deadlocks): a wider slot where two fit, the tile at all where two 64-wide ones do
        # (192 x 192 tiles with fp32 out do not: a table's launch runs the fallback)
        bk, (bm, bn, _, num_buf) = _block_k(launch, True, k // groups, True, explicit), launch.config
        sizes = (num_buf, elem, out_elem)
        if bk != BLOCK_K and not matmul_sm90.ring_fits(bm, bn, bk, *sizes):
            if explicit:
                raise ValueError(f"matmul: Launch.block_k={bk} needs two K slots in shared memory (the ring of one "
                                 f"deadlocks) ({launch})")
            bk = BLOCK_K
        launch = launch._replace(block_k=bk)
    served = launch.sm90 and (sm90_serves(launch, groups, k) and not (a_km or b_kn or accumulate)
                              and tma is not False and sm90_ok and tma_fits)
    if launch.sm90 and not (served and matmul_sm90.ring_fits(*launch.config[:2], launch.block_k, *sizes)):
        if explicit and served:
            raise ValueError(f"matmul: {launch} needs two K slots in shared memory beside its {out_dtype} output's "
                             "staging tiles (the ring of one deadlocks)")
        if explicit:
            raise ValueError(f"matmul: an sm90 launch ({launch}) computes a forward product (K a multiple of "
                             f"{BLOCK_K} a group, no accumulate) on an sm_90 GPU (bf16/fp16, TMA-addressable, "
                             "tiles of 128 rows and up to 128 columns, 64 rows and up to 256, or 192 rows and up "
                             "to 64 -- twice those in one K-group, where 128- and 192-row tiles may also be 96 or "
                             "192 wide; a tail after 128-row tiles only)")
        launch = sm90_fallback(launch, "groups" if groups > 1 else "plain")
    if launch.sm90:
        head = wave_rows(m, n, launch.config, sms) if launch.tail else m
        tail = SM90_TAIL._replace(block_k=launch.block_k)
        return _Plan(True, tuple((lo, hi, lc.config, lc.block_k, lc.persistent)
                                 for lo, hi, lc in ((0, head, launch), (head, m, tail)) if hi > lo))
    if launch.swap and (a_km or b_kn or accumulate) and not explicit:  # a table's swap serves forward layouts only
        launch = launch._replace(swap=False)
    swap = launch.swap
    if swap:  # B's rows on the kernel's M side
        if groups > 1 or a_km or b_kn or launch.split or accumulate:
            raise ValueError("matmul: a swap launch computes a plain-K forward product (no K-groups, split-K, "
                             "transposed operands or accumulation)")
        m, n = n, m
    grouped = groups > 1
    split = split_of(launch, groups, m, n)
    # a group's K: whole K-tiles, K split as evenly as they allow (exactly K / groups where K is a multiple of groups
    # x BLOCK_K, as k_groups ensures for a layer); past K the loads are zeros (masks; TMA's bounds)
    kg = cdiv(k, groups * BLOCK_K) * BLOCK_K if grouped else k
    use_tma = tma_fits if tma is None else tma
    bk = _block_k(launch, use_tma and is_cuda, kg, grouped, explicit)
    bm, bn, warps, stages = fitted_config(launch.config, elem, 4 if split else out_elem, accumulate, explicit, bk)
    tiles, progs, persistent = tile_grid(launch, split, m, n, bm, bn, sms)
    # the tile loop's stride, a constexpr: the SM count (a persistent grid; programs past the last tile run no
    # iteration) or ONE_PASS (a program a tile) -- never the grid itself, which would compile a kernel for
    # every tile count, i.e. for nearly every M a step brings (a JIT stall in the middle of a rollout)
    if tiles > ONE_PASS:
        raise ValueError(f"matmul: {m} x {n} in tiles of {bm} x {bn} is more than {ONE_PASS} tiles")
    parts = groups // split if split else 0
    return _Plan(False, swap=swap, split=split, parts=parts, kg=kg, use_tma=use_tma, bm=bm, bn=bn, bk=bk,
                 warps=warps, stages=stages, stride=sms if persistent else ONE_PASS,
                 grid=(progs, parts) if split else (progs,), flat=launch.flat)


def matmul(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
           row_parallel: bool = False, launch: Launch | None = None, tma: bool | None = None) -> torch.Tensor:
    """``x [M, K] @ w [N, K].T (+ bias)`` -> [M, N] in ``out_dtype`` (default x.dtype); K in the
    canonical K-groups when ``row_parallel``."""
    return mm(x, w, bias, out_dtype, groups=k_groups(x.shape[1]) if row_parallel else 1, launch=launch, tma=tma)


def linear_unfolded(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                    launch: Launch | None = None) -> torch.Tensor | Partials:
    """The row-parallel ``linear`` (inference, TP=1), its fold left to the next op where the launch for M splits K
    (the decode sizes): ``Partials`` whose ``add_rms_norm`` gives the bits of this linear's output added and normed;
    where the launch does not split, that output itself. ``launch``: as ``mm``'s (a benchmark's search)."""
    x2 = x.reshape(-1, x.shape[-1])
    out = mm(x2, w, bias, groups=k_groups(x.shape[-1]), launch=launch, fold=False)
    if isinstance(out, Partials):
        return out._replace(parts=out.parts.view(out.parts.shape[0], *x.shape[:-1], w.shape[0]))
    return out.view(*x.shape[:-1], w.shape[0])


# the backward's products (a backward promises determinism, not invariance: plain K order)
def grad_output(dy2: torch.Tensor, x_dtype: torch.dtype) -> torch.Tensor:
    return dy2.to(x_dtype).contiguous()


def grad_input(dy2: torch.Tensor, w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return mm(dy2, w, b_kn=True, out_dtype=dtype, groups=1)


def grad_weight(dy2: torch.Tensor, x2: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return mm(dy2, x2, a_km=True, b_kn=True, out_dtype=dtype, groups=1)


def grad_bias(dy2: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    ones = torch.ones(1, dy2.shape[0], dtype=dy2.dtype, device=dy2.device)
    return mm(ones, dy2, b_kn=True, out_dtype=torch.float32, groups=1)[0].to(dtype)


def partials_per_rank(tp_size: int) -> int:
    """P of ``shard_partial``'s [P, ..., N]: the half's sum at TP=2, else the rank's groups."""
    mine = K_GROUPS // tp_size
    return 1 if mine == HALF else mine


def shard_partial(x: torch.Tensor, w_shard: torch.Tensor, tp_size: int) -> torch.Tensor:
    """fp32 partials of a row-parallel rank for its K-slice, [P, ..., N]: at TP=2 (P = 1) its
    half's sum, h0 or h1 (one fused call over its 4 groups); at TP=4/8 its 8/k group partials."""
    k_full = x.shape[-1] * tp_size
    if K_GROUPS % tp_size or k_groups(k_full) != K_GROUPS:
        raise ValueError(f"triton row-parallel linear: TP={tp_size} needs TP | {K_GROUPS} and K={k_full} a multiple "
                         f"of {K_GROUPS * BLOCK_K}")
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    mine = K_GROUPS // tp_size
    if mine == HALF:
        parts = mm(x2, w_shard, out_dtype=torch.float32, groups=mine)[None]
    else:
        kg = x2.shape[1] // mine
        parts = torch.stack([mm(x2[:, g * kg:(g + 1) * kg], w_shard[:, g * kg:(g + 1) * kg], out_dtype=torch.float32)
                             for g in range(mine)])  # strided slices: TMA reads them in place, no weight copy
    return parts.reshape(parts.shape[0], *x.shape[:-1], w_shard.shape[0])


def combine_partials(parts: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """Ranks' partials stacked in rank order [k, P, ..., N] (8, 2 or 1 in all: group partials,
    the two halves, or the halves' all-reduced sum), folded as the fused kernel does, + bias, one
    rounding."""
    flat = parts.reshape(-1, *parts.shape[2:])
    count = flat.shape[0]
    if count not in (1, 2, K_GROUPS):
        raise ValueError(f"triton combine_partials: {count} partials; expected {K_GROUPS} group partials, the 2 "
                         "halves or their all-reduced sum")
    out = torch.empty(*flat.shape[1:], dtype=out_dtype, device=parts.device)
    return fold_partials(flat.contiguous(), out, bias, count, run_of(count))


def launch_problem(launch: Launch, kind: str) -> str:
    """Why ``launch`` is not a form that tests/gpu proves for K order ``kind`` ("plain" or "groups"), or "": a
    Triton config of ``CANDIDATE_CONFIGS`` with 64-, 128- or 256-wide K loads (split-K per group or per half in
    K-groups only, swap in plain K only), or a Gluon form of the candidates (``SM90_CANDIDATES``; plain K also
    ``SM90_PLAIN_CANDIDATES``) with K slots of ``matmul_sm90.SLOT_WIDTHS``."""
    if kind not in ("plain", "groups"):
        return f"K order {kind!r} is not 'plain' or 'groups'"
    if launch.sm90:
        forms = {lc.config for lc in (SM90_CANDIDATES if kind == "groups" else SM90_PLAIN_CANDIDATES)}
        if launch.config not in forms:
            return f"sm90 config {launch.config} is none of the proven Gluon forms {sorted(forms)}"
        if launch.block_k not in matmul_sm90.SLOT_WIDTHS:
            return f"sm90 K slots {launch.block_k} wide: proven {matmul_sm90.SLOT_WIDTHS}"
        if launch.split or launch.swap or launch.flat:
            return "an sm90 launch has no split, swap or flat form"
        if launch.tail and launch.config[0] != 2 * matmul_sm90.HALF:
            return "Launch.tail follows 128-row tiles only"
        return ""
    if launch.tail:
        return "Launch.tail is a form of the sm90 launch"
    if launch.config not in CANDIDATE_CONFIGS:
        return f"config {launch.config} is not in CANDIDATE_CONFIGS (the configs tests/gpu proves)"
    if launch.block_k not in (BLOCK_K, 2 * BLOCK_K, 4 * BLOCK_K):
        return f"block_k {launch.block_k}: proven {BLOCK_K}, {2 * BLOCK_K} and {4 * BLOCK_K}"
    if launch.split not in (0, 1, HALF) or (launch.split and kind == "plain"):
        return f"split {launch.split}: split-K runs per group (1) or per half ({HALF}), in K-groups only"
    if launch.swap and kind == "groups":
        return "a swap launch computes plain K only"
    return ""


def launch_json(launch: Launch) -> dict:
    """A launch as a launch file names it: its config and the fields it sets away from their defaults."""
    return {"config": list(launch.config)} | {f: v for f, v in launch._asdict().items()
                                             if f != "config" and v != Launch._field_defaults[f]}


def _file_launch(spec, where: str) -> Launch:
    if not isinstance(spec, dict) or "config" not in spec:
        raise ValueError(f"{where}: 'launch' must be an object with a 'config' of 4 integers")
    unknown = set(spec) - set(Launch._fields)
    if unknown:
        raise ValueError(f"{where}: unknown launch field(s) {sorted(unknown)}; known: {list(Launch._fields)}")
    config = spec["config"]
    if not (isinstance(config, list) and len(config) == 4 and all(type(v) is int and v > 0 for v in config)):
        raise ValueError(f"{where}: launch config {config!r} is not 4 positive integers (BLOCK_M, BLOCK_N, warps, "
                         "stages)")
    for f, v in spec.items():
        if f != "config" and type(v) is not type(Launch._field_defaults[f]):
            raise ValueError(f"{where}: launch field {f!r} is {v!r}; expected a "
                             f"{type(Launch._field_defaults[f]).__name__}")
    return Launch(**{**spec, "config": tuple(config)})


def load_launches(path) -> dict[tuple[str, int, int], list[tuple[int, int, Launch]]]:
    """A launch file's table, each entry checked: (K order, N, K) -> [(first row, last row, launch)]. A ValueError
    names the file, the entry and what is wrong (not a launch file, a missing or unknown field, rows that overlap
    another entry's, a launch that tests/gpu does not prove)."""
    return _launch_table(_launch_doc(path), path)


def launch_doc(path) -> dict:
    """A launch file as written (its device and versions, its entries with layer and measured medians), after the
    checks of ``load_launches``: the file is read once."""
    doc = _launch_doc(path)
    _launch_table(doc, path)
    return doc


def launch_entries(path) -> list[dict]:
    """A launch file's entries as written (``launch_doc``)."""
    return launch_doc(path)["launches"]


def _rows_overlap(a, b) -> bool:
    """Whether row ranges ``a`` and ``b`` ([first, last], inclusive) share a row."""
    return a[0] <= b[1] and b[0] <= a[1]


def _launch_doc(path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"matmul launch file {path}: cannot read it ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != LAUNCH_FILE_FORMAT or not isinstance(doc.get("launches"),
                                                                                                list):
        raise ValueError(f"matmul launch file {path}: not a launch file (expected an object with \"format\": "
                         f"{LAUNCH_FILE_FORMAT!r} and a \"launches\" list)")
    return doc


def _launch_table(doc: dict, path) -> dict[tuple[str, int, int], list[tuple[int, int, Launch]]]:
    table: dict[tuple[str, int, int], list[tuple[int, int, Launch]]] = {}
    for i, e in enumerate(doc["launches"]):
        where = f"matmul launch file {path}: launches[{i}]"
        need = {"kind", "n", "k", "rows", "launch"}
        if not isinstance(e, dict) or need - set(e):
            raise ValueError(f"{where}: missing field(s) {sorted(need - set(e) if isinstance(e, dict) else need)}")
        if set(e) - need - {"layer", "measured"}:
            raise ValueError(f"{where}: unknown field(s) {sorted(set(e) - need - {'layer', 'measured'})}")
        kind, n, k, rows = e["kind"], e["n"], e["k"], e["rows"]
        if not all(type(v) is int and v > 0 for v in (n, k)):
            raise ValueError(f"{where}: n and k must be positive integers (got {n!r}, {k!r})")
        if not (isinstance(rows, list) and len(rows) == 2 and all(type(v) is int for v in rows)
                and 1 <= rows[0] <= rows[1]):
            raise ValueError(f"{where}: rows {rows!r} is not [first, last] with 1 <= first <= last")
        if kind == "groups" and k_groups(k) == 1:
            raise ValueError(f"{where}: K={k} has no canonical K-groups (a multiple of {K_GROUPS * BLOCK_K}): a "
                             "layer of that K runs plain K")
        launch = _file_launch(e["launch"], where)
        problem = launch_problem(launch, kind)
        if problem:
            raise ValueError(f"{where}: {problem}")
        lo, hi = rows
        same = table.setdefault((kind, n, k), [])
        clash = next((r for r in same if _rows_overlap(r, rows)), None)
        if clash:
            raise ValueError(f"{where}: rows {lo}-{hi} overlap rows {clash[0]}-{clash[1]} of another entry for "
                             f"({kind}, N={n}, K={k})")
        same.append((lo, hi, launch))
    return table


def use_launches(path=None) -> dict[tuple[str, int, int], list[tuple[int, int, Launch]]]:
    """Run every product by the launch file at ``path`` where it names a launch for the shape and M
    (``launch_for``), or by the built-in tables alone (None). The file is read and checked whole before anything
    changes. Returns the table in use."""
    table = load_launches(path) if path is not None else {}
    FILE_LAUNCHES.clear()
    FILE_LAUNCHES.update(table)
    _tables_version[0] += 1
    return FILE_LAUNCHES


def device_launch_file(name: str) -> Path:
    """The packaged launch file of the GPU model ``name`` (``torch.cuda.get_device_name``'s), present or not."""
    return device_file(DEVICE_LAUNCH_DIR, name, ".json")


def use_device_launches(name: str | None) -> dict[tuple[str, int, int], list[tuple[int, int, Launch]]]:
    """Run products by the packaged launch file of the GPU model ``name`` where it names a launch (``launch_for``;
    a user's file, ``use_launches``, comes first), or by the built-in tables where the package has no file for
    it, or for None. The file is checked whole, as ``load_launches`` checks it, and must name ``name`` as its
    ``device``. Returns the table in use."""
    path = device_launch_file(name) if name is not None else None
    table = {}
    if path is not None and path.exists():
        doc = _launch_doc(path)  # read once: its entries checked, then its device
        table = _launch_table(doc, path)
        if doc.get("device") != name:
            raise ValueError(f"matmul launch file {path}: its \"device\" is {doc.get('device')!r}, not {name!r}, the "
                             "GPU whose file its name makes it")
    DEVICE_LAUNCHES.clear()
    DEVICE_LAUNCHES.update(table)
    _tables_version[0] += 1
    _device_name[0] = name
    return DEVICE_LAUNCHES


def save_launches(path, entries: list[dict], meta: dict | None = None) -> list[dict]:
    """Write ``entries`` (launch file entries: kind, n, k, rows, launch as ``launch_json``, optionally layer and
    measured) into the launch file at ``path``, over the entries already there whose rows they overlap for the same
    shape (and over earlier ones of ``entries``: two layers of one shape, e.g. o and down where the intermediate
    size is the hidden size, are one product measured twice); the rest are kept. The whole file is checked as
    ``load_launches`` checks it before anything is written, then written to a temporary file and renamed, so the file
    on disk is always a launch file. Returns the file's entries."""
    path = Path(path)
    old = _launch_doc(path)["launches"] if path.exists() else []

    def clash(a, b):
        return (a["kind"], a["n"], a["k"]) == (b["kind"], b["n"], b["k"]) and _rows_overlap(a["rows"], b["rows"])

    entries = [e for i, e in enumerate(entries) if not any(clash(e, later) for later in entries[i + 1:])]
    kept = [o for o in old if not any(clash(o, e) for e in entries)]
    doc = {"format": LAUNCH_FILE_FORMAT, **(meta or {}),
           "launches": sorted(kept + entries, key=lambda e: (e["kind"], e["n"], e["k"], e["rows"]))}
    _launch_table(doc, path)  # what the file would hold, checked before anything is written
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, path)
    finally:  # a failed write (disk full) leaves the old file and no temporary beside it
        tmp.unlink(missing_ok=True)
    return doc["launches"]


if os.environ.get(LAUNCH_FILE_ENV):
    use_launches(os.environ[LAUNCH_FILE_ENV])
