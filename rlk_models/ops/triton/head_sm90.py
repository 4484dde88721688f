"""The log-prob head's statistics kernel for Hopper (sm_90), written in Gluon: the contract of
``logprob_head._head_stats_kernel`` at its bf16 launch of 128 rows and 8 warps -- the same dots in the
same K order on the same MMA layout (16 rows a warp, the tile's 256 vocab entries across a warp's
lanes), so the same per-tile max, sums, target logit and kept probabilities -- scheduled with warp
specialization. Natively bitwise the Triton kernel (tests/gpu: stats, kept probabilities, log-probs
and gradients); ``logprob_head.STATS_KERNEL`` says where it runs.

Why a second kernel
    In training the head keeps the tile probabilities, and the Triton kernel then loads h and W
    through pointers: its TMA build spilled (session 19: 288 bytes). Its 128 x 256 fp32 tile takes
    128 registers a thread beside the loads' addresses and the epilogue's values; the 8B step's head
    forward ran at ~520 TFLOP/s (39.3 ms for 16,384 x 151,936 x 4,096), the 1.7B's at ~460 (22.0 ms at
    K = 2048), against ~665 for the decoder's matmuls. Here a loader warp issues every load by TMA
    with 24 registers, and the two consumer warpgroups get 240 each (setmaxnreg).

The kernel (``_stats_ws``; one program a 128-row x 256-entry tile, 12 warps)
    - the loader warp (``_stats_producer``) brings, per 64-wide K step, h's two 64-row halves and the
      256 x 64 weight tile into ``NUM_BUF`` slots; a slot is refilled once both consumers freed it;
    - each consumer warpgroup (``_stats_consumer``) owns 64 rows: ``acc = h W^T`` by wgmma over K in
      order, one dot in flight; then ``_epilogue``, ``_head_stats_kernel``'s on its rows: mask the entries
      past V, the row max, the target's logit, ``p = exp(l - max)``, its sum (and ``sum p l`` for the
      entropy), and the probabilities rounded to h's dtype and stored by TMA (training). The mask runs in a
      row's last vocab tile only and the target's select-sum only in tiles that hold a target: elsewhere
      their values were discarded (session 35: every output's bits the same as before; the grid form 2-7% faster
      at most points, ping-pong, whose epilogue ran under the other warpgroup's dots, unchanged).
Programs are ordered as the Triton kernel's tiles: neighbouring programs share a weight tile.

Measured (H200, session 29, ``head_sweep.py --stats-kernels``, T = 16384, V = 151,936): with the
probabilities kept, 35.9 ms against the Triton kernel's 38.5 at K = 4096 (1.22x the cuBLAS lm_head
matmul's 29.5), but 23.1 against 21.9 at K = 2048; without them, even (35.2 / 35.0, 19.7 / 20.0). Both
warpgroups finish their dots together and then run the epilogue while the tensor cores idle: a
larger share of the tile's time at the shorter K. The two warpgroups taking turns at the tensor cores,
one's epilogue under the other's dots, as CUTLASS's ping-pong GEMM (``_stats_pingpong``, persistent)
closes it there: session 30, K = 2048, 19.3 ms kept and 18.7 not kept against the Triton kernel's 21.8
and 20.8 (0.89x, 0.90x); at K = 4096 the grid form stays ahead (37.0 against ping-pong's 37.8, Triton 38.7).
At T = 2048 ping-pong wins at both K (0.82-0.97x the Triton kernel), at T = 256 it loses (1.03-1.26x: too few
tiles a program to hide an epilogue under).
"""

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
from .utils import cdiv, num_sms

# (K slots, consumer registers, maxnreg, ping-pong): two consumer warpgroups of 64 rows and a TMA warp (12 warps;
# maxnreg registers a thread at launch, setmaxnreg gives the consumers theirs and the loader 24). Shared memory: a
# slot is 48 KB (h's two halves and the weight tile; ping-pong: one consumer's 64 rows and the weight tile, 40 KB),
# and 64 KB stage the kept probabilities' TMA store. ``logprob_head._sm90_config`` picks one by T and K (session
# 30's sweep: the grid form below 1024 rows, ping-pong from there but at K = 4096 from 8192 rows; 2 slots were
# 1.33-1.43x slower than 3 and ping-pong at 3 slots 1.02-1.24x slower than at 4: dropped)
STATS_SM90_CONFIG = (3, 240, 168, False)
STATS_PINGPONG_CONFIG = (4, 240, 168, True)
STATS_SM90_CANDIDATES = [STATS_SM90_CONFIG, STATS_PINGPONG_CONFIG]
BLOCK_M = 128  # the Triton kernel's bf16 launch whose bits this kernel gives (``logprob_head.STATS_CONFIG``)


@gluon.jit
def _epilogue(acc, q_desc, stage, tgt_ptr, m_ptr, s_ptr, e_ptr, t_ptr, T, V, n_stats, start, r0, pid_v,
              HAS_TGT: gl.constexpr, WITH_E: gl.constexpr, KEEP_P: gl.constexpr):
    """``_head_stats_kernel``'s epilogue, in its order, on one warpgroup's logits ``acc`` (rows r0 ..
    r0 + 63 of vocab tile pid_v): mask the entries past V, the row max, the target's logit (written by
    the tile that holds it: one nonzero term at most), p = exp(l - max), its sum (and sum p l), and p in
    h's dtype by TMA out of ``stage`` (rows past T clipped)."""
    HALF: gl.constexpr = acc.shape[0]
    BLOCK_V: gl.constexpr = acc.shape[1]
    ACC: gl.constexpr = acc.type.layout
    rm = r0 + gl.arange(0, HALF, layout=gl.SliceLayout(1, ACC))
    v0 = pid_v * BLOCK_V
    rv = v0 + gl.arange(0, BLOCK_V, layout=gl.SliceLayout(0, ACC))
    valid = rv[None, :] < V
    if v0 + BLOCK_V > V:  # the row's last vocab tile only: elsewhere every entry is < V (the same values, skipped)
        acc = gl.where(valid, acc, float("-inf"))
    mx = gl.max(acc, axis=1)
    row_ok = rm < T
    # the target's logit, where one of the warpgroup's targets is in the tile (~10% of tiles at V = 151,936: the
    # select-sum's values are discarded elsewhere). Every warp reads all 64 targets (the layout repeats them in
    # each warp), so the test is uniform and needs no exchange between warps
    # (targets are vocab ids, the shard's from ``start``: others and -1 are in no tile)
    if HAS_TGT:
        EVERY_WARP: gl.constexpr = gl.BlockedLayout([HALF // 32], [32], [gl.num_warps()], [0])
        rows = r0 + gl.arange(0, HALF, layout=EVERY_WARP)
        tgt_all = gl.load(tgt_ptr + rows, mask=rows < T, other=-1).to(gl.int32) - start  # vocab ids fit int32
        if gl.max(((tgt_all >= v0) & (tgt_all < v0 + BLOCK_V) & (tgt_all < V)).to(gl.int32), axis=0) > 0:
            tgt = gl.load(tgt_ptr + rm, mask=row_ok, other=-1).to(gl.int32) - start
            inside = (tgt >= v0) & (tgt < v0 + BLOCK_V) & (tgt < V)
            hit = gl.sum(gl.where(rv[None, :] == tgt[:, None], acc, 0.0), axis=1)
            gl.store(t_ptr + rm, hit, mask=row_ok & inside)
    p = gl.exp(acc - mx[:, None])
    out = rm * n_stats + pid_v
    gl.store(m_ptr + out, mx, mask=row_ok)
    gl.store(s_ptr + out, gl.sum(p, axis=1), mask=row_ok)
    if WITH_E:
        gl.store(e_ptr + out, gl.sum(p * gl.where(valid, acc, 0.0), axis=1), mask=row_ok)
    if KEEP_P:
        stage.store(p.to(q_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(q_desc, [r0, pid_v * BLOCK_V], stage)
        tma.store_wait(0)


@gluon.jit
def _staging(q_desc):
    """Each consumer's staging tile for the probabilities' TMA store, of q_desc's block (without the
    kept probabilities q_desc is h's, and the tiles go unused)."""
    return gl.allocate_shared_memory(q_desc.dtype, [2] + q_desc.block_type.shape, q_desc.layout)


@gluon.jit
def _stats_producer(h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, tgt_ptr, m_ptr, s_ptr, e_ptr,
                    t_ptr, T, V, K, n_stats, start, row0, pid_v, HAS_TGT: gl.constexpr, WITH_E: gl.constexpr,
                    KEEP_P: gl.constexpr, NUM_BUF: gl.constexpr, CID: gl.constexpr):
    """One warp: each K step's two halves of h and its weight tile into slot i % NUM_BUF, once both
    consumers freed the slot's last use (TMA zero-fills rows past T and V and the K tail)."""
    HALF: gl.constexpr = h_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    BLOCK_V: gl.constexpr = w_desc.block_type.shape[0]
    for i in range(gl.cdiv(K, BLOCK_K)):
        slot = i % NUM_BUF
        mbarrier.wait(empty.index(slot), ((i // NUM_BUF) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, 2 * h_desc.block_type.nbytes + w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(h_desc, [row0, i * BLOCK_K], bar, h_bufs.index(2 * slot))
        tma.async_copy_global_to_shared(h_desc, [row0 + HALF, i * BLOCK_K], bar, h_bufs.index(2 * slot + 1))
        tma.async_copy_global_to_shared(w_desc, [pid_v * BLOCK_V, i * BLOCK_K], bar, w_bufs.index(slot))


@gluon.jit
def _stats_consumer(h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, tgt_ptr, m_ptr, s_ptr, e_ptr,
                    t_ptr, T, V, K, n_stats, start, row0, pid_v, HAS_TGT: gl.constexpr, WITH_E: gl.constexpr,
                    KEEP_P: gl.constexpr, NUM_BUF: gl.constexpr, CID: gl.constexpr):
    """One warpgroup: rows row0 + 64 CID .. + 63 of the tile -- their logits over K in order (the first
    dot without an accumulator, as Triton builds a dot chain from zero), then the stats epilogue."""
    HALF: gl.constexpr = h_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    BLOCK_V: gl.constexpr = w_desc.block_type.shape[0]
    ACC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_V, 16])
    n_k = gl.cdiv(K, BLOCK_K)
    acc = gl.zeros([HALF, BLOCK_V], gl.float32, ACC)
    mbarrier.wait(ready.index(0), 0)
    acc = warpgroup_mma(h_bufs.index(CID), w_bufs.index(0).permute((1, 0)), acc, use_acc=False, is_async=True)
    acc = warpgroup_mma_wait(1, deps=(acc,))  # in flight still: the next dot chains onto it
    for i in range(1, n_k):
        slot = i % NUM_BUF
        mbarrier.wait(ready.index(slot), (i // NUM_BUF) & 1)
        acc = warpgroup_mma(h_bufs.index(2 * slot + CID), w_bufs.index(slot).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))  # the previous step's dot is done: its slot is free
        mbarrier.arrive(empty.index((i - 1) % NUM_BUF), count=1)
    acc = warpgroup_mma_wait(0, deps=(acc,))

    _epilogue(acc, q_desc, q_smem.index(CID), tgt_ptr, m_ptr, s_ptr, e_ptr, t_ptr, T, V, n_stats, start,
              row0 + CID * HALF, pid_v, HAS_TGT, WITH_E, KEEP_P)


@gluon.jit
def _stats_ws(h_desc, w_desc, q_desc, tgt_ptr, m_ptr, s_ptr, e_ptr, t_ptr, T, V, K, n_stats, start, num_pid_m,
              HAS_TGT: gl.constexpr, WITH_E: gl.constexpr, KEEP_P: gl.constexpr, NUM_BUF: gl.constexpr,
              CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """Warp-specialized: this program's 4 warps and a second warpgroup each take 64 of the tile's 128
    rows (``_stats_consumer``), one warp loads by TMA (``_stats_producer``). Program p is row block
    p % num_pid_m of vocab tile p // num_pid_m (the Triton kernel's tile order)."""
    dtype: gl.constexpr = h_desc.dtype
    HALF: gl.constexpr = h_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    BLOCK_V: gl.constexpr = w_desc.block_type.shape[0]
    pid = gl.program_id(0)
    pid_v = pid // num_pid_m
    row0 = (pid % num_pid_m) * (2 * HALF)
    h_bufs = gl.allocate_shared_memory(dtype, [2 * NUM_BUF, HALF, BLOCK_K], h_desc.layout)
    w_bufs = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_V, BLOCK_K], w_desc.layout)
    q_smem = _staging(q_desc)
    ready, empty = ring(NUM_BUF, 2)
    fence_async_shared()
    gl.warp_specialize([
        (_stats_consumer, (h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, tgt_ptr, m_ptr, s_ptr, e_ptr,
                           t_ptr, T, V, K, n_stats, start, row0, pid_v, HAS_TGT, WITH_E, KEEP_P, NUM_BUF, 0)),
        (_stats_consumer, (h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, tgt_ptr, m_ptr, s_ptr, e_ptr,
                           t_ptr, T, V, K, n_stats, start, row0, pid_v, HAS_TGT, WITH_E, KEEP_P, NUM_BUF, 1)),
        (_stats_producer, (h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, tgt_ptr, m_ptr, s_ptr, e_ptr,
                           t_ptr, T, V, K, n_stats, start, row0, pid_v, HAS_TGT, WITH_E, KEEP_P, NUM_BUF, 1)),
    ], [4, 1], [CONSUMER_REGS, 24])


# --- ping-pong form (from 1024 rows, by T and K: ``logprob_head._sm90_config``) ---------------------------------------
# One program an SM walks the 128-row x 256-entry tiles t = pid, pid + programs, ...; consumer warpgroup c takes rows
# 64 c .. 64 c + 63 of each. The two take turns at the tensor cores (mbarriers ``turn``): c's whole K loop, then the
# other's, so one's epilogue runs under the other's dots instead of both idling the tensor cores at once. The loader
# fills one ring of slots (h's 64 rows and the weight tile, 40 KB) in the order the turns use them: tile t's rows
# for consumer 0, then for consumer 1, then tile t + programs. Each consumer's dots and epilogue are
# ``_stats_consumer``'s on its rows, so the same bits; the weight tile is loaded once per consumer.


@gluon.jit
def _pp_producer(h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, turn, tgt_ptr, m_ptr, s_ptr, e_ptr,
                 t_ptr, T, V, K, n_stats, start, num_pid_m, n_tiles, HAS_TGT: gl.constexpr, WITH_E: gl.constexpr,
                 KEEP_P: gl.constexpr, NUM_BUF: gl.constexpr, CID: gl.constexpr):
    """One warp: for each of the program's tiles and each consumer, that consumer's 64 rows of h and the
    weight tile, K step by K step, into slot i % NUM_BUF once its last user freed it."""
    HALF: gl.constexpr = h_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    BLOCK_V: gl.constexpr = w_desc.block_type.shape[0]
    n_k = gl.cdiv(K, BLOCK_K)
    i = 0
    for t in range(gl.program_id(0), num_pid_m * n_tiles, gl.num_programs(0)):
        row0 = (t % num_pid_m) * (2 * HALF)
        v0 = (t // num_pid_m) * BLOCK_V
        for c in gl.static_range(2):
            for kk in range(n_k):
                slot = i % NUM_BUF
                mbarrier.wait(empty.index(slot), ((i // NUM_BUF) & 1) ^ 1)
                bar = ready.index(slot)
                mbarrier.expect(bar, h_desc.block_type.nbytes + w_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(h_desc, [row0 + c * HALF, kk * BLOCK_K], bar, h_bufs.index(slot))
                tma.async_copy_global_to_shared(w_desc, [v0, kk * BLOCK_K], bar, w_bufs.index(slot))
                i += 1


@gluon.jit
def _pp_consumer(h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, turn, tgt_ptr, m_ptr, s_ptr, e_ptr,
                 t_ptr, T, V, K, n_stats, start, num_pid_m, n_tiles, HAS_TGT: gl.constexpr, WITH_E: gl.constexpr,
                 KEEP_P: gl.constexpr, NUM_BUF: gl.constexpr, CID: gl.constexpr):
    """One warpgroup: its 64 rows of each of the program's tiles -- wait for its turn, the K loop
    (``_stats_consumer``'s dots), hand the turn over once its last dot is issued, then the epilogue."""
    HALF: gl.constexpr = h_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    BLOCK_V: gl.constexpr = w_desc.block_type.shape[0]
    ACC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_V, 16])
    n_k = gl.cdiv(K, BLOCK_K)
    j = 0  # the program's tiles done so far: consumer CID's ring steps start at (2 j + CID) n_k
    for t in range(gl.program_id(0), num_pid_m * n_tiles, gl.num_programs(0)):
        base = (2 * j + CID) * n_k
        mbarrier.wait(turn.index(CID), j & 1)
        acc = gl.zeros([HALF, BLOCK_V], gl.float32, ACC)
        mbarrier.wait(ready.index(base % NUM_BUF), (base // NUM_BUF) & 1)
        acc = warpgroup_mma(h_bufs.index(base % NUM_BUF), w_bufs.index(base % NUM_BUF).permute((1, 0)), acc,
                            use_acc=False, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        for kk in range(1, n_k):
            i = base + kk
            slot = i % NUM_BUF
            mbarrier.wait(ready.index(slot), (i // NUM_BUF) & 1)
            acc = warpgroup_mma(h_bufs.index(slot), w_bufs.index(slot).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(acc,))
            mbarrier.arrive(empty.index((i - 1) % NUM_BUF), count=1)
        mbarrier.arrive(turn.index(1 - CID), count=1)  # every dot issued: the other consumer's turn
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty.index((base + n_k - 1) % NUM_BUF), count=1)
        _epilogue(acc, q_desc, q_smem.index(CID), tgt_ptr, m_ptr, s_ptr, e_ptr, t_ptr, T, V, n_stats, start,
                  (t % num_pid_m) * (2 * HALF) + CID * HALF, t // num_pid_m, HAS_TGT, WITH_E, KEEP_P)
        j += 1


@gluon.jit
def _stats_pingpong(h_desc, w_desc, q_desc, tgt_ptr, m_ptr, s_ptr, e_ptr, t_ptr, T, V, K, n_stats, start,
                    num_pid_m, n_tiles, HAS_TGT: gl.constexpr, WITH_E: gl.constexpr, KEEP_P: gl.constexpr,
                    NUM_BUF: gl.constexpr, CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """``_stats_ws``'s tiles, persistent, the consumers taking turns (``_pp_consumer``)."""
    dtype: gl.constexpr = h_desc.dtype
    HALF: gl.constexpr = h_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = h_desc.block_type.shape[1]
    BLOCK_V: gl.constexpr = w_desc.block_type.shape[0]
    h_bufs = gl.allocate_shared_memory(dtype, [NUM_BUF, HALF, BLOCK_K], h_desc.layout)
    w_bufs = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_V, BLOCK_K], w_desc.layout)
    q_smem = _staging(q_desc)
    ready, empty = ring(NUM_BUF, 1)  # one consumer uses a slot
    turn = turns()
    fence_async_shared()
    gl.warp_specialize([
        (_pp_consumer, (h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, turn, tgt_ptr, m_ptr, s_ptr,
                        e_ptr, t_ptr, T, V, K, n_stats, start, num_pid_m, n_tiles, HAS_TGT, WITH_E, KEEP_P,
                        NUM_BUF, 0)),
        (_pp_consumer, (h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, turn, tgt_ptr, m_ptr, s_ptr,
                        e_ptr, t_ptr, T, V, K, n_stats, start, num_pid_m, n_tiles, HAS_TGT, WITH_E, KEEP_P,
                        NUM_BUF, 1)),
        (_pp_producer, (h_desc, w_desc, q_desc, h_bufs, w_bufs, q_smem, ready, empty, turn, tgt_ptr, m_ptr, s_ptr,
                        e_ptr, t_ptr, T, V, K, n_stats, start, num_pid_m, n_tiles, HAS_TGT, WITH_E, KEEP_P,
                        NUM_BUF, 1)),
    ], [4, 1], [CONSUMER_REGS, 24])


def descriptors(h: torch.Tensor, w: torch.Tensor, q: torch.Tensor | None, block_v: int, block_k: int) -> list:
    """Gluon TMA descriptors: h [T, K] in 64-row halves, w [V, K] in block_v rows, both block_k wide; q
    [T, tiles x block_v] (the kept probabilities) in 64 x block_v tiles, else h's again (unused)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    half = BLOCK_M // 2
    out = [TensorDescriptor.from_tensor(x, [rows, block_k], smem_layout([rows, block_k], x.dtype))
           for x, rows in ((h, half), (w, block_v))]
    out.append(out[0] if q is None else TensorDescriptor.from_tensor(q, [half, block_v], smem_layout([half, block_v],
                                                                                                  q.dtype)))
    return out


def usable(h: torch.Tensor) -> bool:
    """Whether this kernel serves h: an sm_90 GPU and bf16 (the dtype whose Triton launch it matches)."""
    return h.dtype == torch.bfloat16 and is_sm90(h)


def launch(h, w, q, tgt, m, s, e, t_logit, n_tiles: int, n_stats: int, with_entropy: bool, block_v: int,
           block_k: int, config=None, start: int = 0, has_targets: bool = True) -> None:
    """``logprob_head._launch_stats``'s stats (and ``q``, the kept probabilities, when given) for
    contiguous h [T, K] and w [V, K] by ``_stats_ws`` (``_stats_pingpong`` when the config says so)."""
    num_buf, consumer_regs, maxnreg, pingpong = config or STATS_SM90_CONFIG
    t, k = h.shape
    hd, wd, qd = descriptors(h, w, q, block_v, block_k)
    num_pid_m = cdiv(t, BLOCK_M)
    common = dict(HAS_TGT=has_targets, WITH_E=with_entropy, KEEP_P=q is not None, NUM_BUF=num_buf,
                  CONSUMER_REGS=consumer_regs, num_warps=4, maxnreg=maxnreg)
    if pingpong:
        _stats_pingpong[(min(num_pid_m * n_tiles, num_sms(h.device)),)](
            hd, wd, qd, tgt, m, s, e, t_logit, t, w.shape[0], k, n_stats, start, num_pid_m, n_tiles, **common)
    else:
        _stats_ws[(num_pid_m * n_tiles,)](hd, wd, qd, tgt, m, s, e, t_logit, t, w.shape[0], k, n_stats, start,
                                          num_pid_m, **common)
