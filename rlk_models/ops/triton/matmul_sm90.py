"""The row-parallel matmul's fused K-group form for Hopper (sm_90), written in Gluon: the contract of
``matmul._mm_tma_kernel`` for grouped K (``GROUPS`` canonical groups, each reduced from zero in K
order; runs of ``RUN`` groups folded in order from zero; the runs' sums added in order; + bias; one
rounding), forward layouts (A [M, K], B [N, K]), so the same bits as every other launch form
(tests/gpu, natively). ``matmul.LAUNCHES`` runs it for grouped products above 256 rows (``Launch.sm90``).

Why a second kernel
    At the training step's size the row-parallel layers (o_proj, down_proj) ran at 1.15-1.38x cuBLAS
    (session 25: o 8B 1.22x, down 8B 1.15x, o 1.7B 1.38x at M = 16384). The group partial, the
    running half and the first half's sum take three fp32 tiles, so the tile is 128 x 128 (cuBLAS:
    128 x 256), and at every group boundary (every 8 K-steps at K = 4096, every 4 at 2048) both
    warpgroups of the Triton kernel wait for their last dots and fold together while the tensor cores
    idle. Triton 3.6 cannot stagger them.

The kernel (``_mm_groups_ws``; 128 x BLOCK_N tiles, 12 warps; one program a tile, or persistent: one an SM,
walking the tiles, so its loader fetches the next tile's K steps while the consumers fold and store the last)
    - a loader warp (``_producer``) brings each K step's two 64-row halves of A and the BLOCK_N x 64
      tile of B into ``NUM_BUF`` slots by TMA; a slot is refilled once both consumers freed it;
    - two consumer warpgroups (``_consumer``) own 64 rows each and take turns issuing their dots
      (mbarriers): at a group boundary one waits for its last dot and folds while the other's dot
      runs, so the tensor cores do not idle there;
    - the epilogue adds the bias and stores the tile by TMA (rows and columns past M and N clipped).

Measured (H200, session 30, ``matmul_sweep.py sm90``, M = 1024 / 16384, x cuBLAS; the Triton flat form it
replaced in brackets): persistent, o 8B 1.04 / 1.03x (1.21 / 1.22x), down 8B 1.04 / 1.03x (1.13 / 1.15x), o
1.7B 1.06 / 1.10x (1.25 / 1.39x), down 1.7B 1.01 / 1.07x (1.09 / 1.22x); one program a tile 1.09 / 1.12x,
1.07 / 1.07x, 1.06 / 1.23x, 0.99 / 1.14x.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .gluon_sm90 import GL_DTYPES, is_sm90, ring, smem_layout, turns
from .utils import num_sms

BLOCK_M = 128  # two consumer warpgroups of 64 rows
CONSUMER_REGS, MAXNREG = 240, 168  # setmaxnreg of the consumers (the loader: 24); registers a thread at launch
GROUP_M = gl.constexpr(8)  # tile order: ``matmul._tile_coords``'s (neighbouring programs share B's column tiles)


@gluon.jit
def _tile(pid, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    size_m = gl.minimum(num_pid_m - first_m, GROUP_M)
    return first_m + (pid % size_m), (pid % in_group) // size_m


@gluon.jit
def _producer(a_desc, b_desc, c_desc, bias_ptr, a_bufs, b_bufs, c_smem, ready, empty, turn, M, N, K, KG,
              HAS_BIAS: gl.constexpr, GROUPS: gl.constexpr, RUN: gl.constexpr, NUM_BUF: gl.constexpr,
              CID: gl.constexpr):
    """One warp: each K step's two halves of A and B's tile into slot i % NUM_BUF, once both consumers
    freed the slot's last use."""
    HALF: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    BLOCK_M: gl.constexpr = 2 * HALF
    n_k = K // BLOCK_K
    i = 0  # the program's K steps so far, over its tiles: the ring's position
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        pid_m, pid_n = _tile(t, M, N, BLOCK_M, BLOCK_N)
        for kk in range(n_k):
            slot = i % NUM_BUF
            mbarrier.wait(empty.index(slot), ((i // NUM_BUF) & 1) ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, 2 * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M, kk * BLOCK_K], bar, a_bufs.index(2 * slot))
            tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M + HALF, kk * BLOCK_K], bar,
                                            a_bufs.index(2 * slot + 1))
            tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N, kk * BLOCK_K], bar, b_bufs.index(slot))
            i += 1


@gluon.jit
def _group(a_bufs, b_bufs, ready, empty, mine, other, i0, n_kg, part, NUM_BUF: gl.constexpr, CID: gl.constexpr):
    """One group's partial from zero: K steps i0 .. i0 + n_kg - 1 in order, this warpgroup's turn at each
    dot (handed to the other consumer once issued); every slot freed once its dot is done."""
    slot = i0 % NUM_BUF
    mbarrier.wait(ready.index(slot), (i0 // NUM_BUF) & 1)
    mbarrier.wait(mine, i0 & 1)
    part = warpgroup_mma(a_bufs.index(2 * slot + CID), b_bufs.index(slot).permute((1, 0)), part, use_acc=False,
                         is_async=True)
    mbarrier.arrive(other, count=1)
    part = warpgroup_mma_wait(1, deps=(part,))
    for kk in range(1, n_kg):
        i = i0 + kk
        slot = i % NUM_BUF
        mbarrier.wait(ready.index(slot), (i // NUM_BUF) & 1)
        mbarrier.wait(mine, i & 1)
        part = warpgroup_mma(a_bufs.index(2 * slot + CID), b_bufs.index(slot).permute((1, 0)), part, is_async=True)
        mbarrier.arrive(other, count=1)
        part = warpgroup_mma_wait(1, deps=(part,))  # the previous step's dot is done: its slot is free
        mbarrier.arrive(empty.index((i - 1) % NUM_BUF), count=1)
    part = warpgroup_mma_wait(0, deps=(part,))
    mbarrier.arrive(empty.index((i0 + n_kg - 1) % NUM_BUF), count=1)
    return part


@gluon.jit
def _consumer(a_desc, b_desc, c_desc, bias_ptr, a_bufs, b_bufs, c_smem, ready, empty, turn, M, N, K, KG,
              HAS_BIAS: gl.constexpr, GROUPS: gl.constexpr, RUN: gl.constexpr, NUM_BUF: gl.constexpr,
              CID: gl.constexpr):
    """One warpgroup: rows 64 CID .. 64 CID + 63 of the tile through every group (``_group``), folded as
    ``_mm_tma_tile`` folds them, then the bias and the store."""
    HALF: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    ACC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    BLOCK_M: gl.constexpr = 2 * HALF
    mine = turn.index(CID)
    other = turn.index(1 - CID)
    n_kg = KG // BLOCK_K
    zero = gl.zeros([HALF, BLOCK_N], gl.float32, ACC)
    stage = c_smem.index(CID)
    i0 = 0  # the program's K steps so far (the ring's position and the turns' parity)
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        pid_m, pid_n = _tile(t, M, N, BLOCK_M, BLOCK_N)
        acc = gl.zeros([HALF, BLOCK_N], gl.float32, ACC)
        if GROUPS == RUN:  # one run: the group partials folded straight into acc
            for g in range(GROUPS):
                part = _group(a_bufs, b_bufs, ready, empty, mine, other, i0 + g * n_kg, n_kg, zero, NUM_BUF, CID)
                acc = acc + part
        else:  # the halves: each run folded from zero, the runs' sums added in order
            for r in gl.static_range(GROUPS // RUN):
                run = gl.zeros([HALF, BLOCK_N], gl.float32, ACC)
                for g in range(r * RUN, r * RUN + RUN):
                    part = _group(a_bufs, b_bufs, ready, empty, mine, other, i0 + g * n_kg, n_kg, zero, NUM_BUF,
                                  CID)
                    run = run + part
                acc = acc + run
        if HAS_BIAS:
            rn = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, ACC))
            acc += gl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(gl.float32)[None, :]
        tma.store_wait(0)  # the last tile's store has read the stage (persistent: it ran under this tile's dots)
        stage.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [pid_m * BLOCK_M + CID * HALF, pid_n * BLOCK_N], stage)
        i0 += GROUPS * n_kg
    tma.store_wait(0)


@gluon.jit
def _mm_groups_ws(a_desc, b_desc, c_desc, bias_ptr, M, N, K, KG, HAS_BIAS: gl.constexpr, GROUPS: gl.constexpr,
                  RUN: gl.constexpr, NUM_BUF: gl.constexpr, CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """Warp-specialized, one program a tile: this program's 4 warps and a second warpgroup take 64 rows
    each (``_consumer``), one warp loads by TMA (``_producer``)."""
    dtype: gl.constexpr = a_desc.dtype
    HALF: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs = gl.allocate_shared_memory(dtype, [2 * NUM_BUF, HALF, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, BLOCK_K], b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [2, HALF, BLOCK_N], c_desc.layout)
    ready, empty = ring(NUM_BUF, 2)
    turn = turns()
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (a_desc, b_desc, c_desc, bias_ptr, a_bufs, b_bufs, c_smem, ready, empty, turn, M, N, K, KG,
                     HAS_BIAS, GROUPS, RUN, NUM_BUF, 0)),
        (_consumer, (a_desc, b_desc, c_desc, bias_ptr, a_bufs, b_bufs, c_smem, ready, empty, turn, M, N, K, KG,
                     HAS_BIAS, GROUPS, RUN, NUM_BUF, 1)),
        (_producer, (a_desc, b_desc, c_desc, bias_ptr, a_bufs, b_bufs, c_smem, ready, empty, turn, M, N, K, KG,
                     HAS_BIAS, GROUPS, RUN, NUM_BUF, 1)),
    ], [4, 1], [CONSUMER_REGS, 24])


def descriptors(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, block_n: int, block_k: int) -> list:
    """Gluon TMA descriptors: A [M, K] in 64-row halves, B [N, K] in block_n rows (both block_k wide),
    C [M, N] in 64 x block_n tiles."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    half = BLOCK_M // 2
    return [TensorDescriptor.from_tensor(x, block, smem_layout(block, x.dtype))
            for x, block in ((a, [half, block_k]), (b, [block_n, block_k]), (c, [half, block_n]))]


def usable(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether this kernel serves the product: an sm_90 GPU, bf16/fp16 operands, fp32/bf16/fp16 out."""
    return a.dtype in (torch.bfloat16, torch.float16) and b.dtype == a.dtype and out.dtype in GL_DTYPES and is_sm90(a)


def launch(a, b, out, bias, groups: int, run: int, block_n: int, num_buf: int, block_k: int,
           persistent: bool = False) -> None:
    """``out`` = A @ B^T in ``groups`` K-groups folded by runs of ``run`` (+ bias), ``_mm_groups_ws``: one
    program a tile, or ``persistent``, one an SM walking the tiles (its loader fetching the next tile's
    K steps while the consumers fold and store the last)."""
    m, k = a.shape
    n = b.shape[0]
    ad, bd, cd = descriptors(a, b, out, block_n, block_k)
    tiles = triton.cdiv(m, BLOCK_M) * triton.cdiv(n, block_n)
    grid = (min(tiles, num_sms(a.device)) if persistent else tiles,)
    _mm_groups_ws[grid](ad, bd, cd, bias if bias is not None else out, m, n, k, k // groups, bias is not None, groups,
                        run, num_buf, CONSUMER_REGS, num_warps=4, maxnreg=MAXNREG)
