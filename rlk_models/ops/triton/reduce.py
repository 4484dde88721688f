"""``token_sum``: a 1-D fp32 vector summed in a fixed order by one program (BLOCK-wide lanes
accumulate their strided elements in index order; the lanes are then folded by ``tl.sum``, a
tree fixed by BLOCK). Used for the training loss; its length is small (tokens), so one program
is enough and the order never depends on the GPU."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..autograd import sum_op

BLOCK = 1024


@triton.jit
def _sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, n, BLOCK):
        idx = i + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + idx, mask=idx < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, 0))


def _forward(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty((), dtype=torch.float32, device=x.device)
    _sum_kernel[(1,)](x.contiguous(), out, x.shape[0], BLOCK=BLOCK)
    return out


token_sum = sum_op(_forward)
