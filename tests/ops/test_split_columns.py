"""``split_columns`` (the decoder's qkv split): its backward writes the blocks' gradients into the
buffer a producer left (``column_buffer``: the Triton q/k norm backward puts dq and dk at their
columns of the qkv gradient), and is torch's concatenation in every other case, bit for bit."""

import torch

from rlk_models.ops.autograd import _join_columns, column_buffer, split_columns


def _grads(t=5, sizes=(8, 4, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t, n, generator=g) for n in sizes]


def test_join_fills_the_producers_buffer_in_place():
    """dq and dk already at their columns (views of the buffer): dv is copied into the free columns,
    and the buffer itself is returned -- no concatenation -- with the concatenation's values."""
    gq, gk, gv = _grads()
    buf = column_buffer(5, 16, (12, 16), gq)
    q, k = buf[:, :8], buf[:, 8:12]
    q.copy_(gq)
    k.copy_(gk)
    out = _join_columns([q, k, gv], [8, 4, 4], torch.Size((5, 16)))
    assert out is buf and torch.equal(out, torch.cat([gq, gk, gv], -1))
    # filled once: the same buffer handed in again is concatenated, never written into
    again = _join_columns([q, k, gv * 2], [8, 4, 4], torch.Size((5, 16)))
    assert again is not buf and torch.equal(again[:, 12:], gv * 2) and torch.equal(buf[:, 12:], gv)


def test_join_concatenates_otherwise():
    """Grads that are no producer's buffer (plain tensors, views of a buffer without free columns,
    blocks at other columns or the copies' columns not free) are concatenated as torch does."""
    gq, gk, gv = _grads()
    want = torch.cat([gq, gk, gv], -1)
    assert torch.equal(_join_columns([gq, gk, gv], [8, 4, 4], torch.Size((5, 16))), want)
    plain = torch.empty(5, 16)  # no free columns marked
    plain[:, :8], plain[:, 8:12] = gq, gk
    out = _join_columns([plain[:, :8], plain[:, 8:12], gv], [8, 4, 4], torch.Size((5, 16)))
    assert out.data_ptr() != plain.data_ptr() and torch.equal(out, want)
    buf = column_buffer(5, 16, (14, 16), gq)  # v's columns 12..15 not all free
    buf[:, :8], buf[:, 8:12] = gq, gk
    out = _join_columns([buf[:, :8], buf[:, 8:12], gv], [8, 4, 4], torch.Size((5, 16)))
    assert out is not buf and torch.equal(out, want)
    swapped = column_buffer(5, 16, (12, 16), gq)  # k's gradient at q's columns: not where the split put it
    swapped[:, :4] = gk
    out = _join_columns([gq, swapped[:, :4], gv], [8, 4, 4], torch.Size((5, 16)))
    assert out is not swapped and torch.equal(out, want)


def test_split_columns_is_torch_split_forward_and_backward():
    """Views of x forward; without a producer's buffer the gradient is torch.split's, bitwise; with
    grad off (vLLM) it is torch.split itself."""
    x = torch.randn(5, 16, requires_grad=True)
    gs = _grads()
    parts = split_columns(x, [8, 4, 4])
    assert all(p._base is x for p in parts) and [p.shape[1] for p in parts] == [8, 4, 4]
    (got,) = torch.autograd.grad(parts, x, gs)
    (want,) = torch.autograd.grad(x.split([8, 4, 4], -1), x, gs)
    assert torch.equal(got, want)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(split_columns(x, [8, 4, 4]), x.split([8, 4, 4], -1)))
