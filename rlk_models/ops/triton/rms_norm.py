"""RMSNorm in Triton (hidden states [M, D] or per head [T, H, D]), forward and backward.

Contract
    A program normalises ``_fwd_rows(D)`` consecutive rows (1 from D = 1024 up, 8 for a 128-wide
    head), each alone: its sum of squares is ``tl.sum`` along the D axis of a [rows, ``BLOCK_D``]
    tile (``BLOCK_D`` = next power of two >= D, zero-padded), with ``num_warps`` a function of D
    only: the reduction tree is fixed by D and never by the number of rows or a row's place in
    the tile (the H200 tests shift rows against the tile). Contract version 4; version 3 ran one
    row a program, a different tree below D = 1024. fp32 ``x * (1/sqrt(ss/D + eps))`` (IEEE sqrt and
    division) rounds to x's dtype, then multiplies the weight in that dtype -- the reference's
    rounding points. Bits differ from the reference backend only through the sum's tree
    (tolerance-level). ``add_rms_norm(x, r, w)`` is the same kernel with the decoder's residual
    add in front: s = x + r rounded once to x's dtype (torch's add), stored, then the code above
    on s -- so it returns exactly ``(rms_norm(x + r, w), x + r)`` with one launch instead of two.

Backward (deterministic, no atomics)
    One fused pass: each program owns a fixed chunk of ``_bwd_tile(D)`` rows (a function of D
    only), walks it ``ROWS`` rows at a time in row order, writes each row's dx (its sum over D by
    ``tl.sum`` of the tile's row) and adds the tile's ``dy * n`` column sums into an fp32 dw
    partial; the chunk partials are added in chunk order and rounded once. x and dy are read once
    (the earlier split dx / dw kernels read them twice); dw is skipped when the weight needs no
    gradient.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..autograd import column_slot, run_forward, shared_column_buffer
from ..canonical import LINEAR_K_GROUPS, Partials
from ..checks import check_add_rms_norm, check_rms_norm, check_rms_norm_rope
from .matmul import fold_parts
from .rope import rope_backward, rotated_hi, rotated_lo
from .utils import cdiv, next_power_of_2


def _block(d: int) -> tuple[int, int]:
    b = next_power_of_2(d)
    return b, 4 if b <= 2048 else 8


def _fwd_rows(d: int) -> int:
    """Rows a forward program normalises: a function of D only (1 from D = 1024 up; a head's 128:
    8, so a program moves 2 KiB of bf16, not 256 bytes). What held the per-head q/k norm at 0.8 TB/s
    on the H200, with 1 row a program and with 8, was an int64 ``row // H`` (a division subroutine
    a row); in int32, 2.9 TB/s (benchmarks/triton/norm_shapes.py, session 26)."""
    return max(1, 1024 // next_power_of_2(d))


def _bwd_tile(d: int) -> tuple[int, int, int]:
    """(rows per step, rows per program, warps) of the backward: functions of D only (the rows per
    program set dw's summation order: a chunk's partial, then the chunks in order)."""
    b = next_power_of_2(d)
    rows = max(1, min(32, 4096 // b))
    return rows, max(rows, 131072 // b), _block(d)[1]


def _bwd_stages(d: int) -> int:
    """The backward loop's pipeline depth (its loads run this minus one row steps ahead): a launch
    choice, the same bits at any depth (benchmarks/triton/norm_shapes.py checks). H200, 16,384
    tokens (session 27): the hidden add + RMSNorm backward (D = 4096) 189.8 / 156.4 / 143.1 / 145.2 us
    at 1-4 stages; q's per-head backward (D = 128, 32 heads) 142.6 / 131.6 / 175.6 / 175.3 us."""
    return 3 if d >= 1024 else 2


def bwd_tile_candidates(d: int) -> list[tuple[int, int, int]]:
    """The backward tilings benchmarks/triton/ops_sweep.py --search times at width D: the default's
    rows a step and twice them, chunks of 2 to 32 steps (the default: 32 steps of one row at D = 4096,
    which at M = 8192 puts 256 programs on 132 SMs), 4 or 8 warps. Any tiling is deterministic; each
    sums dw in its own order."""
    step = _bwd_tile(d)[0]
    return [(r, r * c, w) for r in (step, 2 * step) for c in (2, 4, 8, 16, 32) for w in (4, 8)]


@triton.jit
def _head_row(tok, head, SX, D):
    """Where x's row starts (a scalar or a vector of rows): head ``head`` of token ``tok``, tokens SX
    elements apart -- a [T, H, D] view read in place (H = 1, SX = D: plain rows). tok and head are
    int32, the ``// H`` and ``% H`` of an int32 row (an int64 division is a subroutine call a row,
    which held the fused q/k norm + RoPE at 0.8 TB/s on the H200)."""
    return tok.to(tl.int64) * SX + head * D


@triton.jit
def _rms_fwd(x_ptr, w_ptr, y_ptr, rstd_ptr, r_ptr, s_ptr, pos_ptr, tab_ptr, M, D, H, SX, eps, HALF, w2_ptr, y2_ptr,
             rstd2_ptr, H1, b_ptr, ROWS: tl.constexpr, BLOCK_D: tl.constexpr, RES: tl.constexpr, ROPE: tl.constexpr,
             BLOCK_HALF: tl.constexpr, TWO: tl.constexpr, PARTS: tl.constexpr = 0, RUN: tl.constexpr = 1,
             HAS_BIAS: tl.constexpr = False):
    """y = RMSNorm(x) of ROWS rows (y, r, s: contiguous rows of D), each reduced alone along the
    tile's D axis; x's row ``row`` is head ``row % H`` of token ``row // H``, at ``(row // H) * SX +
    (row % H) * D`` (H = 1, SX = D: plain rows; a [T, H, D] view of q or k inside the qkv
    projection's rows is read in place, no copy). RES: of s = x + r, rounded once to x's dtype and
    stored (the residual stream's next value), and then the same code from the load on. ROPE: then
    y's stored rows are rotated in place by the rope kernel's ``rotated_lo``/``rotated_hi`` (halves
    read back after a barrier, the table row at the token's position), so y = rope(RMSNorm(x)) with
    the two ops' rounding points. TWO: heads ``>= H1`` are a second tensor's (q's heads, then k's,
    in one qkv row): their weight is w2 and their rows go to y2/rstd2 ([T, H - H1]), the others' to
    y/rstd ([T, H1]) -- the same code per row (two tensors, not views of one buffer: a custom op's
    outputs must not alias). PARTS (with RES, plain rows): x_ptr holds a row-parallel linear's PARTS
    unfolded fp32 partials [PARTS, M, D] (``canonical.Partials``), and x is their fold by the split-K
    fold kernel's code (``matmul.fold_parts``, runs of RUN) + the bias (b_ptr), rounded to s's dtype:
    the linear's output, not stored. Rows, tokens and heads are int32 (M < 2**31, checked by the caller),
    element offsets int64."""
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = row < M
    tok, head = row // H, row % H  # once a row (H = 1 is specialised: no division)
    cols = tl.arange(0, BLOCK_D)[None, :]  # 2-D from the start: one layout for x, w and y (no conversion)
    mask = row_ok[:, None] & (cols < D)
    if PARTS:
        off = row.to(tl.int64)[:, None] * D + cols
        x = fold_parts(x_ptr, off, mask, M * D, tl.zeros((ROWS, BLOCK_D), dtype=tl.float32), PARTS, RUN)
        if HAS_BIAS:
            x += tl.load(b_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
        x = x.to(s_ptr.dtype.element_ty)
    else:
        x = tl.load(x_ptr + _head_row(tok, head, SX, D)[:, None] + cols, mask=mask, other=0.0)
    # each row's output row, rstd and weight
    y_row, rstd_at, w_row = y_ptr + row.to(tl.int64) * D, rstd_ptr + row, w_ptr + 0 * row
    if TWO:
        second = head >= H1
        out = tl.where(second, tok * (H - H1) + head - H1, tok * H1 + head)  # the row's index in its tensor
        y_row = tl.where(second, y2_ptr, y_ptr) + out.to(tl.int64) * D
        rstd_at = tl.where(second, rstd2_ptr, rstd_ptr) + out
        w_row = tl.where(second, w2_ptr, w_ptr)
    # the weight read a row at a time, in x's layout (L1 hits): a [1, BLOCK_D] load broadcast to the rows
    # went through shared memory, 2 barriers a program (3 more for the pointer select of TWO)
    w = tl.load(w_row[:, None] + cols, mask=mask, other=0.0)
    if RES:
        off = row.to(tl.int64)[:, None] * D + cols
        x = (x.to(tl.float32) + tl.load(r_ptr + off, mask=mask, other=0.0).to(tl.float32)).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + off, x, mask=mask)
    x = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt_rn(tl.sum(x * x, axis=1) / D + eps)
    n = (x * rstd[:, None]).to(y_ptr.dtype.element_ty)
    tl.store(y_row[:, None] + cols, n * w, mask=mask)
    tl.store(rstd_at, rstd, mask=row_ok)
    if ROPE:
        tl.debug_barrier()  # the normalised rows, stored by every thread, are read back in pairs
        j = tl.arange(0, BLOCK_HALF)[None, :]
        ok = row_ok[:, None] & (j < HALF)
        pos = tl.load(pos_ptr + tok, mask=row_ok, other=0).to(tl.int64)[:, None]  # the table row of its position
        c = tl.load(tab_ptr + pos * 2 * HALF + j, mask=ok, other=0.0)
        sn = tl.load(tab_ptr + pos * 2 * HALF + HALF + j, mask=ok, other=0.0)
        lo = y_row[:, None] + j
        x1 = tl.load(lo, mask=ok, other=0.0).to(tl.float32)
        x2 = tl.load(lo + HALF, mask=ok, other=0.0).to(tl.float32)
        tl.debug_barrier()  # every read before any rotated value overwrites the rows
        tl.store(lo, rotated_lo(x1, x2, c, sn).to(y_ptr.dtype.element_ty), mask=ok)
        tl.store(lo + HALF, rotated_hi(x1, x2, c, sn).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _add_rn(a, b, NATIVE: tl.constexpr):
    """a + b in fp32 as its own rounded addition: natively ``add.rn``, which ptxas never contracts
    with the product that made ``a`` into an FMA (a plain add may be, and then the sum is not the
    separate add's: seen on the H200 for fp32 gradients); the interpreter adds in NumPy."""
    if NATIVE:
        return tl.inline_asm_elementwise("add.rn.f32 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.float32,
                                         is_pure=True, pack=1)
    return a + b


@triton.jit
def _rms_bwd(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dwp_ptr, ds_ptr, M, D, heads, sx, sdx, CHUNK: tl.constexpr,
             ROWS: tl.constexpr, BLOCK_D: tl.constexpr, DW: tl.constexpr, DS: tl.constexpr, STAGES: tl.constexpr,
             DX_X: tl.constexpr = False, NATIVE: tl.constexpr = True):
    """dx of rows [chunk * CHUNK, +CHUNK), ROWS at a time, and (DW) this chunk's fp32 dw partial.
    Row r of x is head r % heads of token r // heads, tokens ``sx`` apart (x read in place: per-head
    norms of a slice of the qkv rows); dy is [M, D] rows, and so is dx, or (DX_X) dx is in x's layout
    with tokens ``sdx`` apart (a [T, heads, D] view of a wider buffer: q's columns of the qkv
    gradient). DS: dx is the norm's gradient rounded to x's dtype plus ds (the gradient that reaches
    the fused add's sum directly), rounded again -- the bits of that rounded gradient and a separate
    elementwise add, one pass fewer. The loop's loads run STAGES - 1 row steps ahead (Triton's
    pipeliner: cp.async into shared memory): a chunk is a serial walk, and with one step in flight
    the hidden add + norm's backward moved 2.8 TB/s on the H200 (3 stages: 3.75)."""
    chunk = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    cmask = cols < D
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for r0 in tl.range(chunk * CHUNK, tl.minimum(chunk * CHUNK + CHUNK, M), ROWS, num_stages=STAGES):
        rows = r0 + tl.arange(0, ROWS)
        rmask = rows < M
        ok = rmask[:, None] & cmask[None, :]
        off = rows.to(tl.int64)[:, None] * D + cols[None, :]
        tok, head = rows // heads, rows % heads
        x = tl.load(x_ptr + _head_row(tok, head, sx, D)[:, None] + cols[None, :], mask=ok,
                    other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + off, mask=ok, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)
        n = x * rstd[:, None]
        g = dy * w[None, :]
        dot = tl.sum(g * n, axis=1) / D
        dx = (rstd[:, None] * (g - n * dot[:, None])).to(dx_ptr.dtype.element_ty)
        if DS:
            dx = _add_rn(dx.to(tl.float32), tl.load(ds_ptr + off, mask=ok, other=0.0).to(tl.float32), NATIVE).to(
                dx_ptr.dtype.element_ty)
        if DX_X:
            tl.store(dx_ptr + _head_row(tok, head, sdx, D)[:, None] + cols[None, :], dx, mask=ok)
        else:
            tl.store(dx_ptr + off, dx, mask=ok)
        if DW:
            acc += tl.sum(dy * n, axis=0)
    if DW:
        tl.store(dwp_ptr + chunk.to(tl.int64) * D + cols, acc, mask=cmask)


# _fold_chunks: columns a program (one warp: a column a thread) and its loop's unroll (partials loaded ahead)
FOLD_COLS, FOLD_AHEAD = 32, 64


@triton.jit
def _fold_chunks(dwp_ptr, dw_ptr, n_chunks, D, BLOCK_C: tl.constexpr, AHEAD: tl.constexpr):
    """dw = chunk partials added in chunk order (one launch, no host-side loop). The loop is unrolled
    AHEAD times, and the sm_90 build issues most of an unrolled body's loads before its first add
    (45 of 64), so the chain of adds waits on about one round of loads per AHEAD chunks, not on each
    (one load in flight a column, 128 columns a program: 37 us a launch in the 8B step; unrolled 16
    deep: 14 us). The adds are the same, in the same order: c = 0, 1, ..., n_chunks - 1."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for c in tl.range(n_chunks, loop_unroll_factor=AHEAD):
        acc += tl.load(dwp_ptr + c * D + cols, mask=cols < D, other=0.0)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=cols < D)


def _heads_in_place(x: torch.Tensor) -> bool:
    """x is [T, H, D] with each head's row contiguous (a slice of wider rows, e.g. q or k inside
    the qkv projection's): the kernels read it in place by token stride and head."""
    return x.dim() == 3 and x.stride(2) == 1 and x.stride(1) == x.shape[2]


class _RMSNorm(torch.autograd.Function):
    """RMSNorm, and with (positions, table) the rope of it in the same kernel (``rms_norm_rope``);
    the backward is rope's (the transposed rotation) and then the norm's."""

    @staticmethod
    def forward(ctx, x, w, eps, positions=None, table=None):
        d = x.shape[-1]
        if _heads_in_place(x) and x.shape[0] > 0:
            x2, heads, sx = x, x.shape[1], x.stride(0)  # per-head norm of a slice of wider rows: in place
        else:
            x2 = x.reshape(-1, d).contiguous()  # rope: rows of a contiguous [T, H, D]
            heads = x.shape[1] if positions is not None else 1
            sx = heads * d
        rope = None if positions is None else (positions, table)
        y, rstd = _forward(x2, w, eps, x.numel() // d, heads, sx, rope=rope)
        ctx.save_for_backward(x2, w, rstd, *(rope or ()))
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2, w, rstd, *rope = ctx.saved_tensors
        return *_norm_rope_backward(dy, x2, w, rstd, ctx.needs_input_grad[1], rope), None, None, None


class _QKNormRope(torch.autograd.Function):
    """``rms_norm_rope`` of q [T, Hq, D] and of k [T, Hk, D], adjacent in one row buffer (the qkv
    projection's), in one launch: each head's row runs the kernel's one code with its tensor's
    weight. The backward is the two ops' own, each on its tensor (the same kernels, rows and
    dw summation order as two ``rms_norm_rope`` calls), with dq and dk written at their columns of
    the qkv gradient buffer (``autograd.shared_column_buffer``: the one attention's backward began
    with dv, else a new one): ``split_columns``' backward then returns it instead of concatenating
    the three (or copies dv into it)."""

    @staticmethod
    def forward(ctx, q, k, wq, wk, eps, positions, table):
        t, hq, d = q.shape
        hk = k.shape[1]
        x = q.as_strided((t, hq + hk, d), (q.stride(0), d, 1))
        yq, rq, yk, rk = _forward(x, wq, eps, t * (hq + hk), hq + hk, q.stride(0), rope=(positions, table),
                                  second=(wk, hq))
        ctx.save_for_backward(q, k, wq, wk, rq, rk, positions, table)
        ctx.blocks = column_slot(q), column_slot(k)  # their columns of the qkv gradient buffer (backward)
        return yq.view(t, hq, d), yk.view(t, hk, d)

    @staticmethod
    def backward(ctx, dq, dk):
        q, k, wq, wk, rq, rk, positions, table = ctx.saved_tensors
        need, rope = ctx.needs_input_grad, (positions, table)
        outq = outk = None
        if dq is not None and dk is not None:  # dq and dk at their columns of the qkv gradient buffer
            outq, outk = shared_column_buffer(ctx.blocks[0], q), shared_column_buffer(ctx.blocks[1], k)
        dxq, dwq = (None, None) if dq is None else _norm_rope_backward(dq, q, wq, rq, need[2], rope, outq)
        dxk, dwk = (None, None) if dk is None else _norm_rope_backward(dk, k, wk, rk, need[3], rope, outk)
        return dxq, dxk, dwq, dwk, None, None, None


def _norm_rope_backward(dy, x, w, rstd, want_dw: bool, rope=(), dx_out=None):
    """(dx shaped as dy, dw or None) of y = RMSNorm(x) -- rotated when ``rope`` = (positions,
    table): rope's backward first -- over x's rows (``_rms_fwd``'s order); dx into ``dx_out`` when
    given (x read in place). (Session 27 measured rope's backward inside the norm's kernel, each
    element from its partner half's dy and the table row: slower on the H200, 343-370 against 291
    us for q and k at 8B.)"""
    if rope:
        dy = rope_backward(dy, *rope)
    if _heads_in_place(x):
        dx, dw = _backward(dy, x, w, rstd, want_dw, heads=x.shape[1], sx=x.stride(0), dx_out=dx_out)
    else:
        dx, dw = _backward(dy, x.reshape(-1, x.shape[-1]).contiguous(), w, rstd, want_dw)
    return dx.view(dy.shape), dw


class _AddRMSNorm(torch.autograd.Function):
    """(RMSNorm(s), s) for s = x + residual in one kernel; the backward is the norm's plus the
    gradient that reaches s directly (the residual stream), added once: d x = d residual."""

    @staticmethod
    def forward(ctx, x, residual, w, eps):
        d = x.shape[-1]
        x2, r2 = x.reshape(-1, d).contiguous(), residual.reshape(-1, d).contiguous()
        s = torch.empty_like(x2)
        y, rstd = _forward(x2, w, eps, x2.shape[0], 1, d, r2, s)
        ctx.save_for_backward(s, w, rstd)
        return y.view(x.shape), s.view(x.shape)

    @staticmethod
    def backward(ctx, dy, ds):
        s2, w, rstd = ctx.saved_tensors
        dx, dw = _backward(torch.zeros_like(s2) if dy is None else dy, s2, w, rstd, ctx.needs_input_grad[2], ds=ds)
        shape = (dy if dy is not None else ds).shape
        return dx.view(shape), dx.view(shape), dw, None


def _forward(x2, w, eps, m: int, heads: int, sx: int, r2=None, s=None, rope=None, second=None, parts=None):
    """(y [m, D], rstd [m]) by ``_rms_fwd`` over m rows of x2 (see its row addressing); with r2,
    of s = x2 + r2, written into s; with rope = (positions [m // heads], fp32 table), y rotated.
    With second = (w2, h1): heads >= h1 use w2 and are returned apart, (y, rstd, y2, rstd2). With
    parts = (count, run, bias): x2 is [count, m, D] fp32 partials, folded first (with r2 and s)."""
    d = w.shape[0]
    if m >= 2**31 or (parts and parts[0] * m * d >= 2**31):
        raise ValueError(f"rms_norm: {m} rows (tokens x heads) exceed the kernels' int32 row index (< 2**31)")
    h1 = heads if second is None else second[1]
    y = torch.empty(m // heads * h1, d, dtype=s.dtype if parts else x2.dtype, device=x2.device)
    rstd = torch.empty(y.shape[0], dtype=torch.float32, device=x2.device)
    y2 = torch.empty(m - y.shape[0], d, dtype=x2.dtype, device=x2.device) if second else y
    rstd2 = torch.empty(y2.shape[0], dtype=torch.float32, device=x2.device) if second else rstd
    block, warps = _block(d)
    rows = _fwd_rows(d)
    if m:
        res = r2 is not None
        pos, tab = rope if rope is not None else (y, y)
        count, run, bias = parts or (0, 1, None)
        _rms_fwd[(cdiv(m, rows),)](x2, w, y, rstd, r2 if res else y, s if res else y, pos, tab, m, d, heads, sx,
                                   eps, d // 2, second[0] if second else w, y2, rstd2, h1,
                                   bias if bias is not None else w, ROWS=rows,
                                   BLOCK_D=block, RES=res, ROPE=rope is not None,
                                   BLOCK_HALF=next_power_of_2(max(1, d // 2)), TWO=second is not None,
                                   PARTS=count, RUN=run, HAS_BIAS=bias is not None, num_warps=warps)
    return (y, rstd) if second is None else (y, rstd, y2, rstd2)


def _backward(dy, x2, w, rstd, want_dw: bool, tile: tuple[int, int, int] | None = None, heads: int = 1,
              sx: int | None = None, ds: torch.Tensor | None = None, stages: int | None = None,
              dx_out: torch.Tensor | None = None):
    """(dx [M, D], dw or None) of y = RMSNorm(x2) given dy; ``tile`` (rows per step, rows per
    program, warps) overrides ``_bwd_tile`` (benchmarks: a tiling is deterministic, and a
    different one sums dw in a different order), ``stages`` ``_bwd_stages`` (how far the loads run
    ahead: the same bits at any depth). x2: [M, D] rows, or with ``heads`` > 1 a [T, heads, D] view
    whose tokens lie ``sx`` apart. ``ds``: added to dx in the kernel (the bits of ``dx + ds``).
    ``dx_out``: a [T, heads, D] view (rows of D contiguous, heads D apart) that dx is written into and
    returned as, e.g. q's columns of the qkv gradient; else dx is new [M, D] rows."""
    d = x2.shape[-1]
    m = x2.numel() // d
    block = _block(d)[0]
    rows, chunk, warps = tile or _bwd_tile(d)
    if dx_out is None:
        dx, sdx = torch.empty(m, d, dtype=x2.dtype, device=x2.device), heads * d
    else:
        if dx_out.shape != (m // heads, heads, d) or dx_out.stride()[1:] != (d, 1):
            raise ValueError(f"rms_norm backward: dx_out must be a [T, {heads}, {d}] view with rows of {d} contiguous, "
                             f"got {tuple(dx_out.shape)} strides {dx_out.stride()}")
        dx, sdx = dx_out, dx_out.stride(0)
    chunks = max(1, cdiv(m, chunk))
    alloc = torch.empty if m else torch.zeros  # every chunk's program writes its partial
    dwp = alloc(chunks if want_dw else 1, d, dtype=torch.float32, device=x2.device)
    if m:
        dy2 = dy.reshape(m, d).contiguous()
        ds2 = ds.reshape(m, d).contiguous() if ds is not None else dx
        _rms_bwd[(chunks,)](dy2, x2, w, rstd, dx, dwp, ds2, m, d, heads, d * heads if sx is None else sx, sdx,
                            CHUNK=chunk, ROWS=rows, BLOCK_D=block, DW=want_dw, DS=ds is not None,
                            STAGES=_bwd_stages(d) if stages is None else stages, DX_X=dx_out is not None,
                            NATIVE=x2.is_cuda, num_warps=warps)
    dw = None
    if want_dw:
        dw = torch.empty_like(w)
        _fold_chunks[(cdiv(d, FOLD_COLS),)](dwp, dw, chunks, d, BLOCK_C=FOLD_COLS, AHEAD=FOLD_AHEAD, num_warps=1)
    return dx, dw


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    check_rms_norm(x, weight)
    return run_forward(_RMSNorm, x, weight.contiguous(), eps)  # the kernels read the weight as one contiguous row


def add_rms_norm(x: torch.Tensor | Partials, residual: torch.Tensor, weight: torch.Tensor, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(s), s)`` for ``s = x + residual``: one kernel, the bits of the add and the norm apart. x may
    be ``Partials`` (``matmul.linear_unfolded``; inference): then x is their fold, in the same kernel."""
    if isinstance(x, Partials):
        return _add_rms_norm_partials(x, residual, weight.contiguous(), eps)
    check_add_rms_norm(x, residual, weight)
    return run_forward(_AddRMSNorm, x, residual, weight.contiguous(), eps)


def _add_rms_norm_partials(x: Partials, residual: torch.Tensor, weight: torch.Tensor, eps: float
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``add_rms_norm(combine_partials(x.parts[None], x.bias, x.dtype), residual, ...)`` with the fold in the
    norm's kernel (``_rms_fwd``'s PARTS): no autograd (a training forward's linear folds itself)."""
    count = x.parts.shape[0]
    if (x.parts.shape[1:] != residual.shape or x.dtype != residual.dtype or count not in (2, LINEAR_K_GROUPS)
            or x.parts.dtype != torch.float32):
        raise ValueError(f"add_rms_norm: partials {tuple(x.parts.shape)} {x.parts.dtype} of a {x.dtype} output "
                         f"and residual {tuple(residual.shape)} {residual.dtype} must be [2 or {LINEAR_K_GROUPS}, "
                         "*residual.shape] fp32 of the residual's dtype")
    if torch.is_grad_enabled() and (residual.requires_grad or weight.requires_grad or x.parts.requires_grad):
        raise ValueError("add_rms_norm: unfolded partials are for inference (no gradient through their fold)")
    check_rms_norm(residual, weight)
    d = residual.shape[-1]
    r2 = residual.reshape(-1, d).contiguous()
    s = torch.empty_like(r2)
    # in the runs of mm's own fold of its split launch (the producer's, carried by the partials)
    y, _ = _forward(x.parts.reshape(count, -1, d).contiguous(), weight, eps, r2.shape[0], 1, d, r2, s,
                    parts=(count, x.run, x.bias))
    return y.view(residual.shape), s.view(residual.shape)


def rms_norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, positions: torch.Tensor,
                  table: torch.Tensor) -> torch.Tensor:
    """``rope(rms_norm(x, weight, eps), positions, table)`` of ``x [T, H, D]`` (Qwen3's q/k, read in
    place inside the qkv rows) in one kernel: the two ops' code and rounding points."""
    check_rms_norm_rope(x, weight, positions, table)
    return run_forward(_RMSNorm, x, weight.contiguous(), eps, positions.contiguous(),
                       table.to(torch.float32).contiguous())


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                 positions: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm_rope(q, q_weight, ...), rms_norm_rope(k, k_weight, ...))``: one launch when k's
    heads follow q's in the same rows (q and k as views of the qkv projection's output), else the
    two calls; the same bits either way."""
    check_rms_norm_rope(q, q_weight, positions, table)
    check_rms_norm_rope(k, k_weight, positions, table)
    t, hq, d = q.shape
    adjacent = (k.shape[0] == t and k.shape[2] == d and q.dtype == k.dtype and q.device == k.device and t > 0
                and q.stride()[1:] == (d, 1) == k.stride()[1:] and q.stride(0) == k.stride(0)
                and k.data_ptr() == q.data_ptr() + hq * d * q.element_size()
                and q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr())
    if not adjacent:
        return rms_norm_rope(q, q_weight, eps, positions, table), rms_norm_rope(k, k_weight, eps, positions, table)
    return run_forward(_QKNormRope, q, k, q_weight.contiguous(), k_weight.contiguous(), eps, positions.contiguous(),
                             table.to(torch.float32).contiguous())
