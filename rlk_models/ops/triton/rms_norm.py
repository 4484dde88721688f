"""RMSNorm in Triton (hidden states [M, D] or per head [T, H, D]), forward and backward.

Contract
    One program per row. The sum of squares is ``tl.sum`` over one ``BLOCK_D`` = next power of
    two >= D tile (zero-padded), with ``num_warps`` a function of D only: the reduction tree is
    fixed by D and never by the number of rows. fp32 ``x * (1/sqrt(ss/D + eps))`` (IEEE sqrt and
    division) rounds to x's dtype, then multiplies the weight in that dtype -- the reference's
    rounding points. Bits differ from the reference backend only through the sum's tree
    (tolerance-level).

Backward (deterministic, no atomics)
    dx: one program per row. dw: one program per (128-column block, chunk of 256 rows) sums
    dy * n over its chunk, 16 rows at a time in row order; the chunk partials are added in chunk
    order (fp32), rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_rms_norm

DW_CHUNK = 256  # rows per dw partial


def _block(d: int) -> tuple[int, int]:
    b = triton.next_power_of_2(d)
    return b, 4 if b <= 2048 else 8


@triton.jit
def _rms_fwd(x_ptr, w_ptr, y_ptr, rstd_ptr, D, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt_rn(tl.sum(x * x, axis=0) / D + eps)
    n = (x * rstd).to(y_ptr.dtype.element_ty)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * D + cols, n * w, mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _rms_bwd_dx(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, D, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    n = x * rstd
    g = dy * w
    dx = rstd * (g - n * (tl.sum(g * n, axis=0) / D))
    tl.store(dx_ptr + row * D + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_bwd_dw(dy_ptr, x_ptr, rstd_ptr, dwp_ptr, M, D, CHUNK: tl.constexpr, ROWS: tl.constexpr,
                BLOCK_C: tl.constexpr):
    """Partial dw over rows [chunk * CHUNK, +CHUNK) for one column block: ROWS rows at a time,
    summed in a fixed order (the partition depends on M only through the chunk count)."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    chunk = tl.program_id(1)
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for r0 in range(chunk * CHUNK, tl.minimum(chunk * CHUNK + CHUNK, M), ROWS):
        rows = r0 + tl.arange(0, ROWS)
        ok = (rows[:, None] < M) & (cols[None, :] < D)
        off = rows.to(tl.int64)[:, None] * D + cols[None, :]
        x = tl.load(x_ptr + off, mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + off, mask=ok, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
        acc += tl.sum(dy * (x * rstd[:, None]), axis=0)
    tl.store(dwp_ptr + chunk * D + cols, acc, mask=cols < D)


@triton.jit
def _fold_chunks(dwp_ptr, dw_ptr, n_chunks, D, BLOCK_C: tl.constexpr):
    """dw = chunk partials added in chunk order (one launch, no host-side loop)."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for c in range(n_chunks):
        acc += tl.load(dwp_ptr + c * D + cols, mask=cols < D, other=0.0)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=cols < D)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        d = x.shape[-1]
        x2 = x.reshape(-1, d).contiguous()
        y = torch.empty_like(x2)
        rstd = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
        block, warps = _block(d)
        if x2.shape[0]:
            _rms_fwd[(x2.shape[0],)](x2, w, y, rstd, d, eps, BLOCK_D=block, num_warps=warps)
        ctx.save_for_backward(x2, w, rstd)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2, w, rstd = ctx.saved_tensors
        m, d = x2.shape
        block, warps = _block(d)
        dx = torch.empty_like(x2)
        chunks = max(1, triton.cdiv(m, DW_CHUNK))
        dwp = torch.zeros(chunks, d, dtype=torch.float32, device=x2.device)
        dw = torch.empty_like(w)
        if m:
            dy2 = dy.reshape(m, d).contiguous()
            _rms_bwd_dx[(m,)](dy2, x2, w, rstd, dx, d, BLOCK_D=block, num_warps=warps)
            _rms_bwd_dw[(triton.cdiv(d, 128), chunks)](dy2, x2, rstd, dwp, m, d, CHUNK=DW_CHUNK, ROWS=16, BLOCK_C=128)
        _fold_chunks[(triton.cdiv(d, 128),)](dwp, dw, chunks, d, BLOCK_C=128)
        return dx.view(dy.shape), dw, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    check_rms_norm(x, weight)
    return _RMSNorm.apply(x, weight, eps)
