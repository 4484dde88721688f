"""Primitives of the reference backend: the reductions and transcendentals every op is built from.

What it computes
    ``tree_sum``      a sum over the last dim in one canonical order (below).
    ``matmul_nt``     ``a @ b.T`` in fp32 as products + ``tree_sum`` (no BLAS).
    ``exp``, ``log``, ``sigmoid``   fp32 functions made only of IEEE basic operations.

Contract
    Every output element depends only on its own inputs and on constants; elementwise torch ops
    (``+ - * /``, ``sqrt``, ``round``, ``frexp``, bit shifts) are single correctly rounded IEEE
    operations, so the same element gives the same bits wherever it sits in a tensor, however
    many threads run, and on CPU and CUDA alike. Reductions never go through a torch reduction
    kernel or BLAS, whose order is theirs, not ours (MKL/oneDNN GEMM on CPU changes a row's bits
    with M; ``F.silu`` differs between vector body and scalar tail).

    ``tree_sum(x, groups=G)``: the last dim (length K) is zero-padded to a multiple of G and cut
    into G contiguous groups. Inside a group the values are summed by a *halving tree* over the
    group padded with zeros to a power of two: step s adds element i and element i + h
    (h = half the current length). The G group sums are then combined by an *adjacent pairwise*
    tree ((g0+g1)+(g2+g3))+... over G padded to a power of two.
      - Prefix invariance (G = 1): appending zeros to x never changes the result, because the
        extra tree levels add exact zeros. Attention relies on this: a token's sum over keys is
        the same in a full-sequence pass (masked keys are exact zeros) and in a decode step that
        sees only its own context.
      - Tensor-parallel shape (G > 1): rank r of k (k | G) owning the contiguous K-slice
        [r K/k, (r+1) K/k) owns whole groups, i.e. a subtree of the adjacent tree, so partial
        sums gathered from the ranks and combined pairwise give the same bits as one rank.

    ``exp``/``log`` follow Cephes' ``expf``/``logf`` (range reduction + minimax polynomial),
    written as separate torch ops so that nothing can be contracted into an FMA. Accuracy is a
    few ulp of fp32 (tests bound it against float64). ``exp`` flushes results below ~1.2e-38 to
    zero and overflows to +inf above 88.72; ``log`` is defined for positive finite inputs
    (``log(0) = -inf``).

Limits
    Memory-bound: ``matmul_nt`` materialises products in chunks of at most ``CHUNK_ELEMS``
    elements. It is the specification, fast enough for small models, not a fast kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_ELEMS = 1 << 22  # largest temporary product tensor (fp32 elements) matmul_nt builds


def _tree(x: torch.Tensor, adjacent: bool) -> torch.Tensor:
    """Pairwise tree over the last dim padded with zeros to a power of two: each level adds
    element i and i + h (halving) or elements 2i and 2i+1 (adjacent)."""
    n = x.shape[-1]
    p = 1 << max(n - 1, 0).bit_length()
    if p != n:
        x = F.pad(x, (0, p - n))
    while x.shape[-1] > 1:
        h = x.shape[-1] // 2
        x = x[..., 0::2] + x[..., 1::2] if adjacent else x[..., :h] + x[..., h:]
    return x[..., 0]


def tree_sum(x: torch.Tensor, groups: int = 1) -> torch.Tensor:
    """Sum over the last dim in the canonical order (module docstring). Keeps x's dtype."""
    if x.shape[-1] == 0:
        return x.new_zeros(x.shape[:-1])
    if groups == 1:
        return _tree(x, adjacent=False)
    pad = -x.shape[-1] % groups
    if pad:
        x = F.pad(x, (0, pad))
    per_group = _tree(x.unflatten(-1, (groups, -1)), adjacent=False)
    return _tree(per_group, adjacent=True)


def pairwise_combine(x: torch.Tensor) -> torch.Tensor:
    """Adjacent pairwise tree over the last dim: how partials of canonical segments combine."""
    return _tree(x, adjacent=True)


def matmul_nt(a: torch.Tensor, b: torch.Tensor, groups: int) -> torch.Tensor:
    """fp32 ``a @ b.T`` for a [M, K], b [N, K]: out[m, n] = tree_sum(a[m] * b[n], groups).

    Products are formed in fp32 (exact for bf16 inputs) and reduced by ``tree_sum``; the work
    is cut into row/column chunks, which cannot change any element's bits.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"matmul_nt: shapes {tuple(a.shape)} and {tuple(b.shape)} do not contract")
    m, k = a.shape
    n = b.shape[0]
    a32 = a.to(torch.float32).contiguous()
    b32 = b.to(torch.float32).contiguous()
    out = torch.empty(m, n, dtype=torch.float32, device=a.device)
    if m == 0 or n == 0:
        return out
    cols = max(1, min(n, CHUNK_ELEMS // max(k, 1)))
    rows = max(1, min(m, CHUNK_ELEMS // max(cols * k, 1)))
    for r0 in range(0, m, rows):
        ar = a32[r0 : r0 + rows, None, :]
        for c0 in range(0, n, cols):
            out[r0 : r0 + rows, c0 : c0 + cols] = tree_sum(ar * b32[None, c0 : c0 + cols], groups)
    return out


# --- transcendentals from basic IEEE operations (Cephes expf / logf) --------------------------

_EXP_HI = 88.72283935546875  # above: +inf
_EXP_LO = -87.33654022216797  # below: 0 (the result would be subnormal)
_LOG2E = 1.4426950408889634
_LN2_C1 = 0.693359375  # 355/512: n * C1 is exact for |n| < 2**15
_LN2_C2 = -2.12194440e-4
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_SQRTHF = 0.707106781186547524
_LOG_P = (
    7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
    -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
)


def _horner(coeffs: tuple[float, ...], x: torch.Tensor) -> torch.Tensor:
    p = torch.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        p = p * x + c
    return p


def exp(x: torch.Tensor) -> torch.Tensor:
    """fp32 e**x (Cephes expf); see the module docstring for accuracy and range."""
    x = x.to(torch.float32)
    xc = x.clamp(_EXP_LO, _EXP_HI)
    n = torch.round(xc * _LOG2E)
    r = xc - n * _LN2_C1
    r = r - n * _LN2_C2
    y = _horner(_EXP_P, r) * (r * r) + r + 1.0
    # 2**n as two exact power-of-two factors (n reaches 128, past fp32's largest exponent)
    ni = n.to(torch.int32)
    half = ni >> 1
    out = y * ((half + 127) << 23).view(torch.float32)
    out = out * ((ni - half + 127) << 23).view(torch.float32)
    out = torch.where(x < _EXP_LO, torch.zeros_like(out), out)
    return torch.where(x > _EXP_HI, torch.full_like(out, float("inf")), out)


def log(x: torch.Tensor) -> torch.Tensor:
    """fp32 natural log (Cephes logf) for positive finite x; log(0) = -inf, log(+inf) = +inf."""
    x = x.to(torch.float32)
    m, e = torch.frexp(x)  # x = m * 2**e, m in [0.5, 1)
    e = e.to(torch.float32)
    small = m < _SQRTHF
    m = torch.where(small, m + m, m) - 1.0
    e = torch.where(small, e - 1.0, e)
    z = m * m
    y = _horner(_LOG_P, m) * m * z
    y = y + e * _LN2_C2
    y = y - 0.5 * z
    out = m + y
    out = out + e * _LN2_C1
    out = torch.where(x == 0, torch.full_like(out, float("-inf")), out)
    return torch.where(torch.isinf(x) & (x > 0), x, out)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """fp32 1 / (1 + e**-x) with this module's ``exp``."""
    return 1.0 / (1.0 + exp(-x.to(torch.float32)))
