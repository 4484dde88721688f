"""Batch-invariant matmul ``y = x @ w.T`` (+ bias) in Triton: persistent grid, fixed K order.

What it computes
    y[m, n] = sum_k x[m, k] w[n, k] with fp32 accumulation, rounded once to the output dtype
    (bias added in fp32 before the rounding).

Contract
    The reduction over K walks K-tiles of ``BLOCK_K`` (a constant: 64) in increasing order, each
    tile accumulated into the fp32 accumulator by ``tl.dot``; nothing about that order depends on
    M, N or the SM count. Tile sizes along M and N, warps, stages and the persistent grid are
    chosen by M (``config_for``); that is allowed only because every configuration gives the same
    bits -- which the H200 sweep (``benchmarks/triton/matmul_sweep.py``) checks for every config
    at every M, and the tests check under ``TRITON_INTERPRET=1``. No split-K, no atomics.

Limits
    Two variants: pointer loads (``_mm_kernel``; runs in the interpreter) and TMA tensor
    descriptors (``_mm_tma_kernel``; Hopper). K must be a multiple of 8 for TMA (16-byte strides).
    Forward only so far; the autograd function and backward kernels are to come.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_K = 64


@triton.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    in_group = GROUP_M * num_pid_n
    first_m = (tile // in_group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % size_m), (tile % in_group) // size_m


@triton.jit
def _mm_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, sam, sak, sbn, sbk, scm, scn,
               HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr, NUM_PROGS: tl.constexpr):
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):  # the fixed K order
            k = k0 + rk
            a = tl.load(a_ptr + rm[:, None] * sam + k[None, :] * sak, mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
            b = tl.load(b_ptr + k[:, None] * sbk + rn[None, :] * sbn, mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        if HAS_BIAS:
            acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _mm_tma_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGS: tl.constexpr):
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGS, flatten=True):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):  # the fixed K order; TMA zero-fills the K tail
            a = a_desc.load([pid_m * BLOCK_M, k0])
            b = b_desc.load([pid_n * BLOCK_N, k0])
            acc = tl.dot(a, b.T, acc)
        if HAS_BIAS:
            rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


# (BLOCK_M, BLOCK_N, num_warps, num_stages) by M bucket, for narrow (N <= 8192) and wide outputs;
# BLOCK_K is fixed. Picked from the H200 sweep (docs/benchmarks.md), which also shows that every
# one of them gives the same bits.
CONFIGS = {
    (16, "narrow"): (16, 32, 4, 4), (16, "wide"): (64, 256, 4, 3),
    (128, "narrow"): (64, 64, 4, 4), (128, "wide"): (128, 128, 4, 4),
    (1024, "narrow"): (128, 128, 4, 4), (1024, "wide"): (128, 128, 4, 4),
    (1 << 62, "narrow"): (128, 256, 8, 3), (1 << 62, "wide"): (128, 256, 8, 3),
}


def config_for(m: int, n: int) -> tuple[int, int, int, int]:
    width = "narrow" if n <= 8192 else "wide"
    return next(cfg for (bound, w), cfg in CONFIGS.items() if m <= bound and w == width)


def _num_sms(device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def matmul(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
           config: tuple[int, int, int, int] | None = None, tma: bool | None = None) -> torch.Tensor:
    """``x [M, K] @ w [N, K].T (+ bias)`` -> [M, N] in ``out_dtype`` (default x.dtype)."""
    m, k = x.shape
    n = w.shape[0]
    out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    bm, bn, warps, stages = config or config_for(m, n)
    progs = min(_num_sms(x.device), triton.cdiv(m, bm) * triton.cdiv(n, bn))
    bias_arg = bias if bias is not None else out
    use_tma = (x.is_cuda and k % 8 == 0) if tma is None else tma
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        a_d = TensorDescriptor.from_tensor(x, [bm, BLOCK_K])
        b_d = TensorDescriptor.from_tensor(w, [bn, BLOCK_K])
        c_d = TensorDescriptor.from_tensor(out, [bm, bn])
        _mm_tma_kernel[(progs,)](a_d, b_d, c_d, bias_arg, m, n, k, bias is not None, bm, bn, BLOCK_K, 8, progs,
                                 num_warps=warps, num_stages=stages)
    else:
        _mm_kernel[(progs,)](x, w, out, bias_arg, m, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                             out.stride(0), out.stride(1), bias is not None, bm, bn, BLOCK_K, 8, progs,
                             num_warps=warps, num_stages=stages)
    return out
