"""The training attention forward for Hopper (sm_90), written in Gluon: the same contract as
``attention._varlen_fwd`` -- the same dots in the same order and the same row arithmetic
(``_softmax`` is ``_tile_update``'s), so the same bits as it and as the paged kernel vLLM runs
(tests/gpu) -- scheduled as FlashAttention-3 schedules it.

Why a second kernel
    Triton 3.6 builds ``_varlen_fwd``'s key loop as: issue ``q k^T``, wait for every dot in
    flight, softmax, issue ``p v`` and the row-sum dot. A warpgroup's exponentials then run while
    its tensor-core work is idle (at D = 128 they take about half as long as the dots). Written as
    a source order in Triton the overlap is lost (session 24: ptxas serializes every wgmma,
    C7514), and ``tl.range(warp_specialize=True)`` does not build for sm_90. Gluon states the
    asynchronous dots, their waits and the warp roles explicitly.

The kernel (``_varlen_fwd_ws``; one program a BLOCK_M query block of one head, 12 warps)
    - a loader warp (``_ws_producer``) brings q's two halves and the K/V tiles by TMA into
      ``NUM_BUF`` slots; a slot is refilled once both consumers have finished with it (mbarriers);
    - two consumer warpgroups (``_ws_consumer``) each own BLOCK_M / 2 query rows and walk every key
      tile of the block (a tile past a row's position is an exact no-op for it), each tile as::

        issue S_j = q k_j^T                         (async)
        issue acc = p_{j-1} v_{j-1} + acc           (async; acc already rescaled by alpha_{j-1})
        issue l   = p_{j-1} 1       + l
        wait until only the last two are in flight  -> S_j
        softmax(S_j) -> m_j, p_j, alpha_j            (runs under p_{j-1} v_{j-1})
        wait for all; free slot j - 1; acc *= alpha_j, l *= alpha_j

      so every dot sees the operands ``_tile_update`` gives it; only when the dots run changes.
    - PINGPONG: the consumers take turns issuing their dots (FlashAttention-3's warpgroup
      schedule), so one's softmax runs under the other's dots.
    setmaxnreg gives the consumers 240 registers a thread and the loader 24.

Measured (H200, session 28, ``attention_sweep.py --train --quick``): 1.13-1.14x faster than
``_varlen_fwd`` at the 1.7B and 8B heads (8 x 2048 tokens: 0.636 against 0.721 ms at 32/8 heads),
still 1.28-1.35x cuDNN's time (cuDNN walks keys in tiles of 128; the contract's are 64). A
one-program form (both warpgroups in step, the loads issued by the same warps, CTA barriers in the
loop) measured 1.07x *slower* than ``_varlen_fwd`` and was dropped. So was a persistent form (one
program an SM walking the query blocks, the loader running ahead into the next block): the same
bits, 1.09-1.12x slower than this grid (session 29: 0.363 against 0.334 ms at the 1.7B heads, 0.710
against 0.636 at 8B's; git history, 47478fa).

Where it runs: CUDA sm_90 with bf16/fp16 q, k, v that TMA can address and head_dim 64 or 128
(``usable``); ``attention.varlen_attention`` takes it there by default (``FWD_KERNEL``) and
``_varlen_fwd`` elsewhere. Gluon has no interpreter mode: on the CPU this module only compiles
(``benchmarks/triton/attention_sass.py`` builds it for sm_90; tests/ops/triton/test_sm90_build.py),
and its bits are checked on the GPU (tests/gpu/test_triton_contract_8b.py)."""

from __future__ import annotations

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

from .gluon_sm90 import is_sm90, ring, smem_layout, turns
from .utils import cdiv

# (BLOCK_M, K/V slots, pingpong, consumer registers, maxnreg): two consumer warpgroups of BLOCK_M / 2 query rows
# and a TMA warp (12 warps, maxnreg registers a thread at launch; setmaxnreg gives the consumers theirs and the
# loader 24). H200, session 28 (attention_sweep.py --train --quick), forward at 8 x 2048 tokens, 32/8 heads: 0.636,
# 0.649 and 0.634 ms for the default, 4 slots, and 4 slots without pingpong, against 0.721 for _varlen_fwd;
# at 8 x 4096: 2.358, 2.299, 2.356 against 2.624
SM90_CONFIG = (128, 3, True, 240, 168)
SM90_CANDIDATES = [SM90_CONFIG, (128, 4, True, 240, 168), (128, 4, False, 240, 168)]


@gluon.jit
def _softmax(s, m_i, n0, q_pos, qk_scale, BLOCK_N: gl.constexpr, S_LAYOUT: gl.constexpr, DTYPE: gl.constexpr):
    """``_tile_update``'s row arithmetic on one tile's scores: scale, mask, running max, the
    rescale factor and p, rounded to the input dtype."""
    s = s * qk_scale
    rn = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))
    s = gl.where(rn[None, :] <= q_pos[:, None], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s - m_new[:, None]).to(DTYPE)
    return m_new, p, alpha


@gluon.jit
def _load_kv(k_desc, v_desc, k_bufs, v_bufs, ready, empty, i, row, col, NUM_BUF: gl.constexpr):
    """The ring's i-th K/V tile (rows row .., columns col ..) into slot i % NUM_BUF, once both consumers
    freed the slot's last use."""
    slot = i % NUM_BUF
    mbarrier.wait(empty.index(slot), ((i // NUM_BUF) & 1) ^ 1)
    bar = ready.index(slot)
    mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row, col], bar, k_bufs.index(slot))
    tma.async_copy_global_to_shared(v_desc, [row, col], bar, v_bufs.index(slot))


@gluon.jit
def _ws_producer(k_desc, v_desc, q_desc, k_bufs, v_bufs, q_smem, ones_smem, q_bar, ready, empty, turn, o_ptr, lse_ptr,
                 qk_scale, T, so, start, L, row0, h, kvh, n_tiles, BLOCK_N: gl.constexpr, NUM_BUF: gl.constexpr,
                 CID: gl.constexpr, PINGPONG: gl.constexpr):
    """One warp: q's two halves, then the key tiles into the slots, each once both consumers freed it."""
    D: gl.constexpr = k_desc.block_type.shape[1]
    HALF: gl.constexpr = q_desc.block_type.shape[0]
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [start + row0, h * D], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [start + row0 + HALF, h * D], q_bar, q_smem.index(1))
    for j in range(n_tiles):
        _load_kv(k_desc, v_desc, k_bufs, v_bufs, ready, empty, j, start + j * BLOCK_N, kvh * D, NUM_BUF)


@gluon.jit
def _ws_consumer(k_desc, v_desc, q_desc, k_bufs, v_bufs, q_smem, ones_smem, q_bar, ready, empty, turn, o_ptr, lse_ptr,
                 qk_scale, T, so, start, L, row0, h, kvh, n_tiles, BLOCK_N: gl.constexpr, NUM_BUF: gl.constexpr,
                 CID: gl.constexpr, PINGPONG: gl.constexpr):
    """One warpgroup: query rows row0 + 64 CID .. + 63 of the program's block over every key tile of the
    block (a tile past a row's position is an exact no-op for it). PINGPONG: the two consumers take turns
    issuing their dots (FlashAttention-3's warpgroup schedule), so one's softmax runs under the other's
    dots."""
    q = q_smem.index(CID)
    dtype: gl.constexpr = q.dtype
    HALF: gl.constexpr = q.shape[0]
    D: gl.constexpr = q.shape[1]
    S_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    O_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    L_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 16, 16])
    PO_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    PL_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=L_LAYOUT, k_width=2)
    STORE_LAYOUT: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    rm = row0 + CID * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, S_LAYOUT))
    q_pos = gl.where(rm < L, rm, 0)
    m_i = gl.full([HALF], float("-inf"), gl.float32, gl.SliceLayout(1, S_LAYOUT))
    acc = gl.zeros([HALF, D], gl.float32, O_LAYOUT)
    l_acc = gl.zeros([HALF, 16], gl.float32, L_LAYOUT)
    s0 = gl.zeros([HALF, BLOCK_N], gl.float32, S_LAYOUT)
    mine = turn.index(CID)
    other = turn.index(1 - CID)

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(ready.index(0), 0)
    if PINGPONG:
        mbarrier.wait(mine, 0)
    s = warpgroup_mma(q, k_bufs.index(0).permute((1, 0)), s0, use_acc=False, is_async=True)
    if PINGPONG:
        mbarrier.arrive(other, count=1)
    s = warpgroup_mma_wait(0, deps=(s,))
    m_i, p, alpha = _softmax(s, m_i, 0, q_pos, qk_scale, BLOCK_N, S_LAYOUT, dtype)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]
    l_acc = l_acc * gl.convert_layout(alpha, gl.SliceLayout(1, L_LAYOUT))[:, None]
    for j in range(1, n_tiles):
        slot = j % NUM_BUF
        prev = (j - 1) % NUM_BUF
        mbarrier.wait(ready.index(slot), (j // NUM_BUF) & 1)
        if PINGPONG:
            mbarrier.wait(mine, j & 1)
        s = warpgroup_mma(q, k_bufs.index(slot).permute((1, 0)), s0, use_acc=False, is_async=True)
        p_l = gl.convert_layout(p, PL_LAYOUT)
        p_o = gl.convert_layout(p, PO_LAYOUT)
        l_acc = warpgroup_mma(p_l, ones_smem, l_acc, is_async=True)
        acc = warpgroup_mma(p_o, v_bufs.index(prev), acc, is_async=True)
        if PINGPONG:
            mbarrier.arrive(other, count=1)
        s = warpgroup_mma_wait(2, deps=(s,))
        m_i, p, alpha = _softmax(s, m_i, j * BLOCK_N, q_pos, qk_scale, BLOCK_N, S_LAYOUT, dtype)
        l_acc, acc, p_l, p_o = warpgroup_mma_wait(0, deps=(l_acc, acc, p_l, p_o))
        mbarrier.arrive(empty.index(prev), count=1)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]
        l_acc = l_acc * gl.convert_layout(alpha, gl.SliceLayout(1, L_LAYOUT))[:, None]
    last = (n_tiles - 1) % NUM_BUF
    if PINGPONG:
        mbarrier.wait(mine, n_tiles & 1)
    p_l = gl.convert_layout(p, PL_LAYOUT)
    p_o = gl.convert_layout(p, PO_LAYOUT)
    l_acc = warpgroup_mma(p_l, ones_smem, l_acc, is_async=True)
    acc = warpgroup_mma(p_o, v_bufs.index(last), acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(other, count=1)
    l_acc, acc = warpgroup_mma_wait(0, deps=(l_acc, acc))

    l_i = gl.max(l_acc, 1)
    o = acc / gl.convert_layout(l_i, gl.SliceLayout(1, O_LAYOUT))[:, None]
    o = gl.convert_layout(o.to(dtype), STORE_LAYOUT)
    rs = row0 + CID * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, STORE_LAYOUT))
    rd = gl.arange(0, D, layout=gl.SliceLayout(0, STORE_LAYOUT))
    gl.store(o_ptr + (start + rs).to(gl.int64)[:, None] * so + h * D + rd[None, :], o, mask=(rs < L)[:, None])
    lse = gl.convert_layout(m_i, gl.SliceLayout(1, L_LAYOUT)) + gl.log2(l_i)
    rl = row0 + CID * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, L_LAYOUT))
    gl.store(lse_ptr + h * T + start + rl, lse, mask=rl < L)


@gluon.jit
def _varlen_fwd_ws(q_desc, k_desc, v_desc, o_ptr, lse_ptr, cu_ptr, qk_scale, T, so,
                   GROUP: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                   NUM_BUF: gl.constexpr, PINGPONG: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                   num_warps: gl.constexpr):
    """Warp-specialized: this program's 4 warps and a second warpgroup each take half of the BLOCK_M
    query rows (``_ws_consumer``), one warp loads by TMA (``_ws_producer``); K/V slots handed over by
    mbarriers, no CTA-wide barrier in the key loop."""
    dtype: gl.constexpr = q_desc.dtype
    HALF: gl.constexpr = BLOCK_M // 2
    ONES_LAYOUT: gl.constexpr = gl.BlockedLayout([1, 8], [16, 2], [num_warps, 1], [1, 0])
    pid_m = gl.num_programs(0) - 1 - gl.program_id(0)
    seq = gl.program_id(1)
    h = gl.program_id(2)
    start = gl.load(cu_ptr + seq)
    L = gl.load(cu_ptr + seq + 1) - start
    row0 = pid_m * BLOCK_M
    if row0 < L:
        kvh = h // GROUP
        n_tiles = gl.cdiv(gl.minimum(row0 + BLOCK_M, L), BLOCK_N)
        q_smem = gl.allocate_shared_memory(dtype, [2, HALF, D], q_desc.layout)
        k_bufs = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, D], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, D], v_desc.layout)
        ones_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, 16], gl.NVMMASharedLayout.get_default_for([BLOCK_N, 16],
                                                                                                           dtype),
                                              gl.full([BLOCK_N, 16], 1.0, dtype, ONES_LAYOUT))
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        ready, empty = ring(NUM_BUF, 2)
        turn = turns()
        fence_async_shared()
        gl.warp_specialize([
            (_ws_consumer, (k_desc, v_desc, q_desc, k_bufs, v_bufs, q_smem, ones_smem, q_bar, ready, empty, turn, o_ptr,
                            lse_ptr, qk_scale, T, so, start, L, row0, h, kvh, n_tiles, BLOCK_N, NUM_BUF, 0, PINGPONG)),
            (_ws_consumer, (k_desc, v_desc, q_desc, k_bufs, v_bufs, q_smem, ones_smem, q_bar, ready, empty, turn, o_ptr,
                            lse_ptr, qk_scale, T, so, start, L, row0, h, kvh, n_tiles, BLOCK_N, NUM_BUF, 1, PINGPONG)),
            (_ws_producer, (k_desc, v_desc, q_desc, k_bufs, v_bufs, q_smem, ones_smem, q_bar, ready, empty, turn, o_ptr,
                            lse_ptr, qk_scale, T, so, start, L, row0, h, kvh, n_tiles, BLOCK_N, NUM_BUF, 1, PINGPONG)),
        ], [4, 1], [CONSUMER_REGS, 24])


def descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_m: int, block_n: int) -> list:
    """Gluon TMA descriptors over [T, H * D] views of q, k, v (tiles of one head's rows)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    out = []
    for x, rows in ((q, block_m), (k, block_n), (v, block_n)):
        shape, block = [x.shape[0], x.shape[1] * x.shape[2]], [rows, x.shape[2]]
        out.append(TensorDescriptor(x, shape, [x.stride(0), 1], block, smem_layout(block, x.dtype)))
    return out


def usable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether this kernel serves these tensors: an sm_90 GPU, bf16/fp16, head_dim 64 or 128."""
    return q.dtype in (torch.bfloat16, torch.float16) and q.shape[2] in (64, 128) and is_sm90(q)


def launch(q, k, v, o, lse, cu, qk_scale: float, max_len: int, config=None) -> None:
    """o and lse of the packed causal batch (``attention._forward``'s contract) by ``_varlen_fwd_ws``."""
    from .attention import BLOCK_N  # attention imports this module
    block_m, num_buf, pingpong, consumer_regs, maxnreg = config or SM90_CONFIG
    t, hq, d = q.shape
    qd, kd, vd = descriptors(q, k, v, block_m // 2, BLOCK_N)
    _varlen_fwd_ws[(cdiv(max_len, block_m), cu.numel() - 1, hq)](
        qd, kd, vd, o, lse, cu, qk_scale, t, o.stride(0), GROUP=hq // k.shape[1], D=d, BLOCK_M=block_m,
        BLOCK_N=BLOCK_N, NUM_BUF=num_buf, PINGPONG=pingpong, CONSUMER_REGS=consumer_regs, num_warps=4,
        maxnreg=maxnreg)
