"""The matmul's fused K-group form for Hopper (sm_90), written in Gluon: the contract of
``matmul._mm_tma_kernel`` for grouped K (``GROUPS`` canonical groups, each reduced from zero in K
order; runs of ``RUN`` groups folded in order from zero; the runs' sums added in order; + bias; one
rounding), forward layouts (A [M, K], B [N, K]), so the same bits as every other launch form
(tests/gpu, natively). ``matmul.LAUNCHES`` runs it for grouped (row-parallel) products above 128 rows
(``Launch.sm90``). One group is the plain K order of the column-parallel layers (qkv, gate_up): the same
kernel, one partial added to zero, and, with one fp32 tile fewer to hold, tiles up to 256 columns a
consumer (cuBLAS's 128 x 256); candidates (``matmul.SM90_PLAIN_CANDIDATES``), not yet timed.

Why a second kernel
    At the training step's size the row-parallel layers (o_proj, down_proj) ran at 1.15-1.38x cuBLAS
    (session 25: o 8B 1.22x, down 8B 1.15x, o 1.7B 1.38x at M = 16384). The group partial, the
    running half and the first half's sum take three fp32 tiles, so the tile is 128 x 128 (cuBLAS:
    128 x 256), and at every group boundary (every 8 K-steps at K = 4096, every 4 at 2048) both
    warpgroups of the Triton kernel wait for their last dots and fold together while the tensor cores
    idle. Triton 3.6 cannot stagger them.

The kernel (``_mm_groups_ws``; 128 x BLOCK_N or 64 x BLOCK_N tiles, 9 warps, or 192 x BLOCK_N, 13; one program a
tile, or persistent: one an SM, walking the tiles, so its loader fetches the next tile's K steps while the consumers
fold and store the last)
    - a loader warp (``_producer``) brings each K step's 64-row blocks of A and the BLOCK_N x 64
      tile of B (64-row tiles: A's 64 rows and B's two halves) into ``NUM_BUF`` slots by TMA; a slot is
      refilled once every consumer freed it;
    - two consumer warpgroups (``_consumer``; three in a 192-row tile, ``CONSUMERS``) own 64 rows each (64-row
      tiles, ``SPLIT_N``: half the columns each) and take turns issuing their dots (mbarriers, round the
      consumers): at a group boundary one waits for its last dot and folds while another's dot runs, so the
      tensor cores do not idle there;
    - the epilogue adds the bias and stores the tile by TMA (rows and columns past M and N clipped).

Measured (H200, session 30, ``matmul_sweep.py sm90``, M = 1024 / 16384, x cuBLAS; the Triton flat form it
replaced in brackets): persistent, o 8B 1.04 / 1.03x (1.21 / 1.22x), down 8B 1.04 / 1.03x (1.13 / 1.15x), o
1.7B 1.06 / 1.10x (1.25 / 1.39x), down 1.7B 1.01 / 1.07x (1.09 / 1.22x); one program a tile 1.09 / 1.12x,
1.07 / 1.07x, 1.06 / 1.23x, 0.99 / 1.14x. Session 31, 64 x 128 tiles split by columns (6 slots, persistent), where
128-row tiles leave SMs idle: o 8B M = 256 0.98x (the Triton 64 x 128 form 1.06x), down 8B 1.08x (1.09x); o 1.7B
M = 384 / 512 1.36 / 1.21x (1.50 / 1.37x), down 1.7B 1.03 / 0.99x (1.11 / 1.16x). At 128 rows and at 768 they lose
(o 8B 1.14x, 1.27x); 64 x 256 tiles never beat both by more than 0.3%. Session 32 (CPU, not yet timed): three
consumers, 192-row tiles, for the M where 128-row tiles are part padding or a wave and a half (768 at 8B).
Session 50 (H200, ``matmul_sweep.py --search --tiles 128x192,192x192``, then a launch file proven and timed): 192
columns a consumer in one K-group (``wide``: a 128- and a 64-wide box, two dots a K step), 128 tiles a wave: qkv 8B
1.15 / 1.24x -> 0.94 / 1.09x at 512 / 768 rows, gate_up 8B 1.26x -> 1.11x at 192, gate_up 1.7B 1.22x -> 1.10x at
384. Session 51 (H100, the same with ``--tiles 128x96,192x96``): 96 columns (64 + 32), 192 x 96 tiles: qkv 8B 1.19x
-> 1.11x at 384 rows, gate_up 1.7B 1.12x -> 1.05x at 192. Session 56 (H100, two forms tried and reverted, each
bitwise): where the last row of 128-row tiles has rows for one consumer only (257-320 rows), that consumer working
alone is slower than both working on the padding. Passing the idle consumer's dots but keeping the turns (399cda8):
o 8B at 257 rows 24.2 -> 28.5 us, down 8B 76.8 -> 81.4 us. Dropping the turns too, the tile the first consumer's
alone (6cf84b9): 26.5 -> 30.1 and 78.5 -> 88.9 us. One warpgroup's dots into one accumulator are a dependent chain;
two warpgroups' chains interleave on the tensor cores. What would use the rows: those tiles as 64-row tiles split by
columns (both consumers, half the columns each) in the same launch as the 128-row ones.
"""

from __future__ import annotations

import functools

import torch
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
from .utils import BLOCK_K, cdiv, fit_stages, num_sms

HALF = 64  # a consumer warpgroup's rows: a tile is 128 or 192 x BLOCK_N (64 rows each) or 64 x BLOCK_N split by columns
# the K slot widths (``Launch.block_k``) benchmarks/triton/gluon_sass.py builds and tests/gpu proves, each where two
# slots fit (``slots``); a 256-wide slot fits twice in a 64-row tile, but none has been built or run
SLOT_WIDTHS = (BLOCK_K, 2 * BLOCK_K)
SMEM_BYTES, SMEM_BARRIERS = 227 * 1024, 512  # an sm_90 block's shared memory; the ring's and turns' mbarriers (280 B)
# by consumer warpgroups: setmaxnreg of the consumers (the loader's warpgroup: 24) and the registers a thread at
# launch. Triton pads the warps to whole warpgroups (2 consumers: 9 warps launch as 12; 3: 13 as 16), and an SM's
# four quarters each hold a quarter of its 64K registers and a warp of every warpgroup (``fits_sm``): 16 warps
# launch at <= 128 a thread, and then 3 x 160 + 24 <= 512 (session 32's 168 / 152 built, but 16 warps x 152 could
# not launch)
REGS = {2: (240, 168), 3: (160, 128)}
# a wide consumer's columns (``wide``, one K-group): 192, so 192 x 192 tiles are one wave at gate_up 8B's 192 rows and
# qkv 8B's 768 (128 tiles on 132 SMs; 128-wide: 192 tiles, 1.45 waves), as a 128- and a 64-wide box and fp32 tile
# (session 50, H200: 1.26x -> 1.11x and 1.24x -> 1.09x cuBLAS there; ``matmul.TUNED``); or 96, a 64- and a 32-wide
# box, so 192 x 96 tiles are one wave at qkv 8B's 384 rows and gate_up 1.7B's 192 (128 tiles each, where 192 x 128
# make 96; session 51, H100: 1.19x -> 1.11x and 1.12x -> 1.05x cuBLAS there; ``matmul.TUNED``). 128 x 96 (one wave at
# qkv 8B's 192 rows) gained nothing there
WIDE_COLUMNS = (96, 192)
# the one wide tile in K-groups (session 54, bitwise on an H100): a consumer's 64 x 96 as 64 + 32 in its three fp32
# tiles a box (group partial, run, sum: 144 registers of its 240, where 64 x 128 holds 192), 43 column tiles at the 8B
# layers' N = 4096 and 22 at the 1.7B's 2048, so 129 tiles at o/down 8B's 384 rows and 132 at o/down 1.7B's 768,
# where 128 x 128 tiles make 96 (cuBLAS's pick there: ``nvjet_sm90_tst_128x96``, session 54's --kernels table). 192
# x 96 (three consumers at 160 registers) and 192-wide ones (288 registers of fp32 tiles) do not fit. Session 55: 64 x
# 96, its 64 rows split by columns, a consumer's 48 as 32 + 16 (m64n32k16 and m64n16k16 dots), so 110 tiles at the
# 1.7B layers' 257-320 rows (64 x 128: 80; cuBLAS runs 64 x 88 there, 120 tiles; ours 1.37-1.54x cuBLAS on the H100)
# and 129 at the 8B's 129-192; session 56 (H100): bitwise, and faster nowhere it was searched (``SM90_CANDIDATES``)
GROUPED_WIDE = ((128, 96), (64, 96))
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
def _producer(a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, a_bufs, b_bufs, b2_bufs, c_smem, c2_smem, ready,
              empty, turn, M, N, K, KG, HAS_BIAS: gl.constexpr, GROUPS: gl.constexpr, RUN: gl.constexpr,
              NUM_BUF: gl.constexpr, SPLIT_N: gl.constexpr, CONSUMERS: gl.constexpr, CID: gl.constexpr,
              WIDE: gl.constexpr):
    """One warp: each K step's A and B tiles into slot i % NUM_BUF (A in a 64-row block a consumer, or B in two
    halves of its rows with ``SPLIT_N``; ``WIDE``: a consumer's B rows past its first box in a second, b2), once
    every consumer freed the slot's last use."""
    HALF: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    WG_N: gl.constexpr = b_desc.block_type.shape[0]
    CW: gl.constexpr = WG_N + WIDE * b2_desc.block_type.shape[0]  # a consumer's columns: its box, and b2's (WIDE)
    A_PER: gl.constexpr = CONSUMERS - SPLIT_N  # A's 64-row blocks a K step (SPLIT_N: one, for both consumers)
    B_PER: gl.constexpr = 1 + SPLIT_N  # B's boxes a K step (and b2's, WIDE): one a consumer's columns
    BLOCK_M: gl.constexpr = A_PER * HALF
    BLOCK_N: gl.constexpr = B_PER * CW
    n_k = K // BLOCK_K
    i = 0  # the program's K steps so far, over its tiles: the ring's position
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        pid_m, pid_n = _tile(t, M, N, BLOCK_M, BLOCK_N)
        for kk in range(n_k):
            slot = i % NUM_BUF
            mbarrier.wait(empty.index(slot), ((i // NUM_BUF) & 1) ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, A_PER * a_desc.block_type.nbytes
                            + B_PER * (b_desc.block_type.nbytes + WIDE * b2_desc.block_type.nbytes))
            for h in gl.static_range(A_PER):
                tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M + h * HALF, kk * BLOCK_K], bar,
                                                a_bufs.index(A_PER * slot + h))
            for h in gl.static_range(B_PER):
                tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N + h * CW, kk * BLOCK_K], bar,
                                                b_bufs.index(B_PER * slot + h))
                if WIDE:
                    tma.async_copy_global_to_shared(b2_desc, [pid_n * BLOCK_N + h * CW + WG_N, kk * BLOCK_K], bar,
                                                    b2_bufs.index(B_PER * slot + h))
            i += 1


@gluon.jit
def _dots(a, b, b2, part, part2, USE_ACC: gl.constexpr, WIDE: gl.constexpr):
    """One K step's dots, issued: A's block by B's into part and (``WIDE``) by b2's into part2."""
    part = warpgroup_mma(a, b.permute((1, 0)), part, use_acc=USE_ACC, is_async=True)
    if WIDE:
        part2 = warpgroup_mma(a, b2.permute((1, 0)), part2, use_acc=USE_ACC, is_async=True)
    return part, part2


@gluon.jit
def _wait_dots(STEPS: gl.constexpr, part, part2, WIDE: gl.constexpr):
    """Until at most the last ``STEPS`` K steps' dots are in flight (``WIDE``: two dots a step)."""
    if WIDE:
        part, part2 = warpgroup_mma_wait(2 * STEPS, deps=(part, part2))
    else:
        part = warpgroup_mma_wait(STEPS, deps=(part,))
    return part, part2


@gluon.jit
def _group(a_bufs, b_bufs, b2_bufs, ready, empty, mine, other, i0, n_kg, part, part2, NUM_BUF: gl.constexpr,
           SPLIT_N: gl.constexpr, CONSUMERS: gl.constexpr, CID: gl.constexpr, WIDE: gl.constexpr):
    """One group's partial from zero: K steps i0 .. i0 + n_kg - 1 in order, this warpgroup's turn at each
    dot (handed to the next consumer once issued); every slot freed once its dot is done. Its operands:
    its 64 of A's rows and all of B's tile, or (``SPLIT_N``) all of A's and its half of B's rows. ``WIDE``: the
    columns past B's first box as a second partial, part2 (two dots a K step, both before the turn passes);
    else part2 is returned as given."""
    A_PER: gl.constexpr = CONSUMERS - SPLIT_N
    B_PER: gl.constexpr = 1 + SPLIT_N
    A_OFF: gl.constexpr = CID * (1 - SPLIT_N)
    B_OFF: gl.constexpr = CID * SPLIT_N
    slot = i0 % NUM_BUF
    mbarrier.wait(ready.index(slot), (i0 // NUM_BUF) & 1)
    mbarrier.wait(mine, i0 & 1)
    part, part2 = _dots(a_bufs.index(A_PER * slot + A_OFF), b_bufs.index(B_PER * slot + B_OFF),
                        b2_bufs.index(B_PER * slot + B_OFF), part, part2, False, WIDE)
    mbarrier.arrive(other, count=1)
    part, part2 = _wait_dots(1, part, part2, WIDE)
    for kk in range(1, n_kg):
        i = i0 + kk
        slot = i % NUM_BUF
        mbarrier.wait(ready.index(slot), (i // NUM_BUF) & 1)
        mbarrier.wait(mine, i & 1)
        part, part2 = _dots(a_bufs.index(A_PER * slot + A_OFF), b_bufs.index(B_PER * slot + B_OFF),
                            b2_bufs.index(B_PER * slot + B_OFF), part, part2, True, WIDE)
        mbarrier.arrive(other, count=1)
        part, part2 = _wait_dots(1, part, part2, WIDE)  # the previous step's dots are done: its slot is free
        mbarrier.arrive(empty.index((i - 1) % NUM_BUF), count=1)
    part, part2 = _wait_dots(0, part, part2, WIDE)
    mbarrier.arrive(empty.index((i0 + n_kg - 1) % NUM_BUF), count=1)
    return part, part2


@gluon.jit
def _consumer(a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, a_bufs, b_bufs, b2_bufs, c_smem, c2_smem, ready,
              empty, turn, M, N, K, KG, HAS_BIAS: gl.constexpr, GROUPS: gl.constexpr, RUN: gl.constexpr,
              NUM_BUF: gl.constexpr, SPLIT_N: gl.constexpr, CONSUMERS: gl.constexpr, CID: gl.constexpr,
              WIDE: gl.constexpr):
    """One warpgroup: rows 64 CID .. 64 CID + 63 of the tile (``SPLIT_N``: its 64 rows, columns CW CID ..
    CW CID + CW - 1) through every group (``_group``), folded as ``_mm_tma_tile`` folds them, then the bias
    and the store. ``WIDE``: its columns past the first WG_N in a second fp32 tile (acc2), folded, biased and
    stored as the first (b2's box): in one K-group, or in K-groups in a ``GROUPED_WIDE`` tile (128 x 96, or 64 x 96
    split by columns, 48 = 32 + 16 a consumer), with a second run beside the first."""
    HALF: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    WG_N: gl.constexpr = b_desc.block_type.shape[0]
    WG_N2: gl.constexpr = b2_desc.block_type.shape[0]  # WIDE: the second tile's columns (else unused)
    ACC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, WG_N, 16])
    ACC2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, WG_N2, 16])
    CW: gl.constexpr = WG_N + WIDE * WG_N2  # its columns: its box, and b2's (WIDE)
    BLOCK_M: gl.constexpr = (CONSUMERS - SPLIT_N) * HALF
    BLOCK_N: gl.constexpr = (1 + SPLIT_N) * CW
    ROW0: gl.constexpr = CID * HALF * (1 - SPLIT_N)  # this warpgroup's rows and columns in the tile
    COL0: gl.constexpr = CID * CW * SPLIT_N
    mine = turn.index(CID)
    other = turn.index((CID + 1) % CONSUMERS)  # the next consumer's turn
    n_kg = KG // BLOCK_K
    zero = gl.zeros([HALF, WG_N], gl.float32, ACC)
    zero2 = gl.zeros([HALF, WG_N2], gl.float32, ACC2)
    stage = c_smem.index(CID)
    i0 = 0  # the program's K steps so far (the ring's position and the turns' parity)
    for t in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        pid_m, pid_n = _tile(t, M, N, BLOCK_M, BLOCK_N)
        acc = gl.zeros([HALF, WG_N], gl.float32, ACC)
        acc2 = gl.zeros([HALF, WG_N2], gl.float32, ACC2)
        if GROUPS == RUN:  # one run: the group partials folded straight into acc
            for g in range(GROUPS):
                part, part2 = _group(a_bufs, b_bufs, b2_bufs, ready, empty, mine, other, i0 + g * n_kg, n_kg, zero,
                                     zero2, NUM_BUF, SPLIT_N, CONSUMERS, CID, WIDE)
                acc = acc + part
                if WIDE:
                    acc2 = acc2 + part2
        else:  # the halves: each run folded from zero, the runs' sums added in order (``WIDE``: GROUPED_WIDE only)
            for r in gl.static_range(GROUPS // RUN):
                run = gl.zeros([HALF, WG_N], gl.float32, ACC)
                run2 = gl.zeros([HALF, WG_N2], gl.float32, ACC2)
                for g in range(r * RUN, r * RUN + RUN):
                    part, part2 = _group(a_bufs, b_bufs, b2_bufs, ready, empty, mine, other, i0 + g * n_kg, n_kg,
                                         zero, zero2, NUM_BUF, SPLIT_N, CONSUMERS, CID, WIDE)
                    run = run + part
                    if WIDE:
                        run2 = run2 + part2
                acc = acc + run
                if WIDE:
                    acc2 = acc2 + run2
        if HAS_BIAS:
            rn = pid_n * BLOCK_N + COL0 + gl.arange(0, WG_N, layout=gl.SliceLayout(0, ACC))
            acc += gl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(gl.float32)[None, :]
            if WIDE:
                rn2 = pid_n * BLOCK_N + COL0 + WG_N + gl.arange(0, WG_N2, layout=gl.SliceLayout(0, ACC2))
                acc2 += gl.load(bias_ptr + rn2, mask=rn2 < N, other=0.0).to(gl.float32)[None, :]
        tma.store_wait(0)  # the last tile's store has read the stage (persistent: it ran under this tile's dots)
        stage.store(acc.to(c_desc.dtype))
        if WIDE:
            c2_smem.index(CID).store(acc2.to(c2_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [pid_m * BLOCK_M + ROW0, pid_n * BLOCK_N + COL0], stage)
        if WIDE:
            tma.async_copy_shared_to_global(c2_desc, [pid_m * BLOCK_M + ROW0, pid_n * BLOCK_N + COL0 + WG_N],
                                            c2_smem.index(CID))
        i0 += GROUPS * n_kg
    tma.store_wait(0)


@gluon.jit
def _mm_groups_ws(a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, M, N, K, KG, HAS_BIAS: gl.constexpr,
                  GROUPS: gl.constexpr, RUN: gl.constexpr, NUM_BUF: gl.constexpr, SPLIT_N: gl.constexpr,
                  CONSUMERS: gl.constexpr, WIDE: gl.constexpr, CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """Warp-specialized: this program's 4 warps and one or two more warpgroups take 64 rows each of a 128- or
    192-row tile (``SPLIT_N``: two, half the columns each of a 64-row tile; ``_consumer``), one warp loads by
    TMA (``_producer``). ``WIDE``: a consumer's columns are B's box and b2's (192 as 128 + 64, 96 as 64 + 32, 48 as
    32 + 16: TMA boxes and Gluon tiles are powers of two), in one K-group or (``GROUPED_WIDE``) in K-groups; else
    b2_desc and c2_desc are b_desc and c_desc, unused."""
    dtype: gl.constexpr = a_desc.dtype
    HALF: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    WG_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs = gl.allocate_shared_memory(dtype, [(CONSUMERS - SPLIT_N) * NUM_BUF, HALF, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [(1 + SPLIT_N) * NUM_BUF, WG_N, BLOCK_K], b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [CONSUMERS, HALF, WG_N], c_desc.layout)
    if WIDE:
        b2_bufs = gl.allocate_shared_memory(dtype, [(1 + SPLIT_N) * NUM_BUF, b2_desc.block_type.shape[0], BLOCK_K],
                                            b2_desc.layout)
        c2_smem = gl.allocate_shared_memory(c2_desc.dtype, [CONSUMERS, HALF, c2_desc.block_type.shape[1]],
                                            c2_desc.layout)
    else:
        b2_bufs = b_bufs
        c2_smem = c_smem
    ready, empty = ring(NUM_BUF, CONSUMERS)
    turn = turns(CONSUMERS)
    fence_async_shared()
    # spelled out: Gluon's JIT does not build a partition's arguments as ``args + (cid,)`` (tried), nor take them as
    # one nested tuple unpacked in the partition (session 50: a CompilationError)
    if CONSUMERS == 2:
        gl.warp_specialize([
            (_consumer, (a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, a_bufs, b_bufs, b2_bufs, c_smem, c2_smem,
                         ready, empty, turn, M, N, K, KG, HAS_BIAS, GROUPS, RUN, NUM_BUF, SPLIT_N, CONSUMERS, 0,
                         WIDE)),
            (_consumer, (a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, a_bufs, b_bufs, b2_bufs, c_smem, c2_smem,
                         ready, empty, turn, M, N, K, KG, HAS_BIAS, GROUPS, RUN, NUM_BUF, SPLIT_N, CONSUMERS, 1,
                         WIDE)),
            (_producer, (a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, a_bufs, b_bufs, b2_bufs, c_smem, c2_smem,
                         ready, empty, turn, M, N, K, KG, HAS_BIAS, GROUPS, RUN, NUM_BUF, SPLIT_N, CONSUMERS, 0,
                         WIDE)),
        ], [4, 1], [CONSUMER_REGS, 24])
    else:  # three consumers: a 192-row tile
        gl.warp_specialize([
            (_consumer, (a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, a_bufs, b_bufs, b2_bufs, c_smem, c2_smem,
                         ready, empty, turn, M, N, K, KG, HAS_BIAS, GROUPS, RUN, NUM_BUF, SPLIT_N, CONSUMERS, 0,
                         WIDE)),
            (_consumer, (a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, a_bufs, b_bufs, b2_bufs, c_smem, c2_smem,
                         ready, empty, turn, M, N, K, KG, HAS_BIAS, GROUPS, RUN, NUM_BUF, SPLIT_N, CONSUMERS, 1,
                         WIDE)),
            (_consumer, (a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, a_bufs, b_bufs, b2_bufs, c_smem, c2_smem,
                         ready, empty, turn, M, N, K, KG, HAS_BIAS, GROUPS, RUN, NUM_BUF, SPLIT_N, CONSUMERS, 2,
                         WIDE)),
            (_producer, (a_desc, b_desc, c_desc, b2_desc, c2_desc, bias_ptr, a_bufs, b_bufs, b2_bufs, c_smem, c2_smem,
                         ready, empty, turn, M, N, K, KG, HAS_BIAS, GROUPS, RUN, NUM_BUF, SPLIT_N, CONSUMERS, 0,
                         WIDE)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])


def fits_sm(registers: int, warps: int) -> bool:
    """Whether ``warps`` warps at ``registers`` a thread launch as one block on an sm_90 SM: its register file is
    four quarters of 16K, a warp's registers are allocated in 256s, and warp w runs on quarter w % 4."""
    per_warp = -(-registers * 32 // 256) * 256
    return 4 * (16384 // per_warp) >= warps


def split_n(block_m: int) -> int:
    """``SPLIT_N`` of block_m-row tiles: 1 where the two consumers split a 64-row tile's columns, 0 where they
    take 64 rows each of a 128- or 192-row tile."""
    return int(block_m == HALF)


def wide(block_m: int, block_n: int) -> bool:
    """Whether a consumer of block_m x block_n tiles takes its columns as two fp32 tiles (a K step two dots;
    ``boxes``): ``WIDE_COLUMNS`` of a 128- or 192-row tile, or 48 of a 64 x 96 tile split by columns."""
    return block_n in WIDE_COLUMNS if not split_n(block_m) else (block_m, block_n) in GROUPED_WIDE


@functools.cache
def boxes(block_m: int, block_n: int) -> tuple[int, int]:
    """A consumer's columns as (B's and C's first TMA box, the second's; 0 where there is one): a ``wide`` consumer's
    two thirds and one third (192 = 128 + 64, 96 = 64 + 32, 48 = 32 + 16: powers of two, as Gluon's tiles and TMA
    boxes are), every other consumer's columns whole."""
    wg_n = block_n // (1 + split_n(block_m))
    return (2 * wg_n // 3, wg_n // 3) if wide(block_m, block_n) else (wg_n, 0)


def consumers(block_m: int) -> int:
    """The consumer warpgroups of block_m-row tiles: 64 rows each, or two sharing a 64-row tile."""
    return max(2, block_m // HALF)


@functools.cache
def serves_tile(block_m: int, block_n: int, plain: bool = False) -> bool:
    """Whether the kernel has a form for block_m x block_n tiles: 128 rows (a consumer's 64 each) or 64 (a
    consumer's half of the columns each), a consumer's columns 16 up to 128 (its three fp32 tiles -- group
    partial, run, sum -- fill the registers at 64 x 128), or up to 256 in one K-group (``plain``:
    the partial and the sum, the wgmma's widest N); or 192 rows (three consumers at 160 registers a thread: up to
    128 columns in one K-group, 64 in K-groups; an m64n256k16 needs more than 128 at launch). A consumer's
    columns are a power of two (a TMA block's rows), or, in one K-group in a 128- or 192-row tile, 96 or 192
    (``wide``: 64 + 32 or 128 + 64, two tiles of their own), and in K-groups, and in one, the ``GROUPED_WIDE`` tiles
    (128 x 96; 64 x 96, 48 = 32 + 16 a consumer). Each built for sm_90 without a spill (gluon_sass.py)."""
    wg_n, rest = divmod(block_n, 1 + split_n(block_m))
    widest = {HALF: 256 if plain else 128, 2 * HALF: 256 if plain else 128, 3 * HALF: 128 if plain else 64}
    if wide(block_m, block_n):
        return (block_m, block_n) in GROUPED_WIDE or (plain and block_m in (2 * HALF, 3 * HALF))
    return rest == 0 and wg_n & (wg_n - 1) == 0 and 16 <= wg_n <= widest.get(block_m, 0)


def slots(block_m: int, block_n: int, block_k: int, num_buf: int, elem_size: int, out_elem_size: int) -> int:
    """The K slots that fit shared memory, at most ``num_buf`` (``utils.fit_stages``): each slot a K step's A and B
    tiles, beside the consumers' output staging tiles (c_smem: a 64 x WG_N tile a consumer, or one 64 x BLOCK_N
    split in two) and the barriers (H200: 227 KiB a block). Slots never change the K order, hence the bits."""
    return fit_stages(block_m + block_n, elem_size, num_buf, block_m * block_n * out_elem_size,
                      SMEM_BYTES - SMEM_BARRIERS, block_k)


MIN_SLOTS = 2  # the consumers free a slot one K step late: a ring of one waits on itself


def ring_fits(block_m: int, block_n: int, block_k: int, num_buf: int, elem_size: int, out_elem_size: int) -> bool:
    """Whether ``slots`` leaves the ring its ``MIN_SLOTS``: what ``launch`` needs to run the form at all."""
    return slots(block_m, block_n, block_k, num_buf, elem_size, out_elem_size) >= MIN_SLOTS


@functools.cache
def form(block_m: int, block_n: int, block_k: int, num_buf: int, elem_size: int, out_elem_size: int) -> tuple:
    """(``_mm_groups_ws``'s tile constexprs, its registers a thread at launch) for block_m x block_n tiles with up
    to ``num_buf`` K slots: what ``launch`` runs and benchmarks/triton/gluon_sass.py builds."""
    n_consumers = consumers(block_m)
    consumer_regs, maxnreg = REGS[n_consumers]
    return dict(NUM_BUF=slots(block_m, block_n, block_k, num_buf, elem_size, out_elem_size),
                SPLIT_N=split_n(block_m), CONSUMERS=n_consumers, WIDE=int(wide(block_m, block_n)),
                CONSUMER_REGS=consumer_regs), maxnreg


def descriptors(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, block_m: int, block_n: int, block_k: int) -> list:
    """Gluon TMA descriptors of block_m x block_n tiles: A [M, K] in 64-row blocks, B [N, K] in a consumer's
    rows (block_n, or half of it when the tile's 64 rows are split by columns), both block_k wide; C [M, N]
    in a consumer's 64-row block of its columns; then B's and C's second boxes (``wide``: a consumer's columns as
    ``boxes``; else B's and C's descriptors again, unused)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    def desc(x: torch.Tensor, block: list[int]):
        return TensorDescriptor.from_tensor(x, block, smem_layout(block, x.dtype))

    box, box2 = boxes(block_m, block_n)
    first = [desc(a, [HALF, block_k]), desc(b, [box, block_k]), desc(c, [HALF, box])]
    return first + ([desc(b, [box2, block_k]), desc(c, [HALF, box2])] if box2 else first[1:])


def usable(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether this kernel serves the product: an sm_90 GPU, bf16/fp16 operands, fp32/bf16/fp16 out."""
    return a.dtype in (torch.bfloat16, torch.float16) and b.dtype == a.dtype and out.dtype in GL_DTYPES and is_sm90(a)


def launch(a, b, out, bias, groups: int, run: int, block_m: int, block_n: int, num_buf: int, block_k: int,
           persistent: bool = False) -> None:
    """``out`` = A @ B^T in ``groups`` K-groups folded by runs of ``run`` (+ bias), ``_mm_groups_ws`` in
    block_m x block_n tiles (``serves_tile``) with up to ``num_buf`` K slots (``form``): one program a tile, or
    ``persistent``, one an SM walking the tiles (its loader fetching the next tile's K steps while the consumers
    fold and store the last)."""
    if not serves_tile(block_m, block_n, plain=groups == 1):
        raise ValueError(f"matmul_sm90: no form for {block_m} x {block_n} tiles in {groups} K-group(s)")
    consts, maxnreg = form(block_m, block_n, block_k, num_buf, a.element_size(), out.element_size())
    if consts["NUM_BUF"] < MIN_SLOTS:
        raise ValueError(f"matmul_sm90: {block_m} x {block_n} tiles of {block_k}-wide K slots fit one slot in shared "
                         "memory; the ring needs two")
    m, k = a.shape
    n = b.shape[0]
    descs = descriptors(a, b, out, block_m, block_n, block_k)
    tiles = cdiv(m, block_m) * cdiv(n, block_n)
    grid = (min(tiles, num_sms(a.device)) if persistent else tiles,)
    _mm_groups_ws[grid](*descs, bias if bias is not None else out, m, n, k, k // groups, bias is not None, groups,
                        run, **consts, num_warps=4, maxnreg=maxnreg)
