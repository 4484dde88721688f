"""Autograd glue shared by the backends: the ``torch.autograd.Function`` and the public wrapper
of ops whose forward is the same everywhere and whose backward is the backend's. A backend
passes its kernels in and exports what comes back, so argument checks, saved tensors and
gradient plumbing are written once."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable

import torch

from .canonical import HeadStats, TileProbs, one_shard_stats
from .checks import check_embedding, check_head, check_linear, check_silu_mul, check_silu_mul_linear


@dataclass(frozen=True)
class DenseKernels:
    """A backend's kernels under ``linear``, ``silu_mul`` and ``silu_mul_linear`` (no autograd,
    2-D contiguous operands):

    - ``linear(x2, w, b, out_dtype, row_parallel) -> [M, N]``: the forward (K in the canonical
      K-groups when ``row_parallel``);
    - ``grad_output(dy2, x_dtype)``: the incoming gradient as the backward kernels read it;
    - ``grad_input(dy2, w, dtype) -> [M, K]``, ``grad_weight(dy2, x2, dtype) -> [N, K]``,
      ``grad_bias(dy2, dtype) -> [N]``;
    - ``silu_mul(gu2) -> [M, I]``: silu of the first half of each row times the second half;
    - ``silu_mul_backward(gu2, dy2, with_act) -> (dgu2 [M, 2I], act [M, I] or None)``: with
      ``with_act``, the same pass over gu2 also writes ``silu_mul(gu2)``, bit for bit."""
    linear: Callable
    grad_output: Callable
    grad_input: Callable
    grad_weight: Callable
    grad_bias: Callable
    silu_mul: Callable
    silu_mul_backward: Callable


class _Unrecorded:
    """The ctx of a forward run outside autograd (``run_forward``): keeps what the forward sets, saves nothing."""

    def save_for_backward(self, *tensors: torch.Tensor) -> None:
        pass


def run_forward(fn: type[torch.autograd.Function], *args):
    """``fn.apply(*args)`` where a gradient is recorded (grad mode on and a tensor argument requiring one), else
    ``fn.forward`` alone on a ctx that saves nothing: the same code, kernels and outputs, without autograd's
    bookkeeping a call (its graph node, the inputs' unwrapping, the saved tensors), host time that a forward-only
    pass -- vLLM's inference mode, an RL loop's old-policy and reference log-probs -- waits on at a small batch,
    where a step is host-bound (session 58)."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return fn.apply(*args)
    return fn.forward(_Unrecorded(), *args)


def _shaped(t: torch.Tensor, *shape: int) -> torch.Tensor:
    """``t`` as ``shape`` (same elements, contiguous): ``t`` itself where the shape is already that,
    so that a 2-D op's output is not a view. (FSDP2 warns on a wrapped module returning a view --
    an in-place op on one would skip its pre-backward hook -- and the decoder is 2-D throughout.)"""
    return t if t.shape == shape else t.view(shape)


def dense_ops(k: DenseKernels) -> tuple[Callable, Callable, Callable]:
    """``(linear, silu_mul, silu_mul_linear)`` of a backend from its ``DenseKernels``."""

    def grads(dy2, x2, w, b, need_w: bool, need_b: bool):
        dw = k.grad_weight(dy2, x2, w.dtype) if need_w else None
        db = k.grad_bias(dy2, b.dtype) if b is not None and need_b else None
        return dw, db

    class _Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b, out_dtype, row_parallel):
            x2 = x.reshape(-1, x.shape[-1]).contiguous()
            ctx.save_for_backward(x2, w, b)
            ctx.x_shape = x.shape
            return _shaped(k.linear(x2, w, b, out_dtype, row_parallel), *x.shape[:-1], w.shape[0])

        @staticmethod
        def backward(ctx, dy):
            x2, w, b = ctx.saved_tensors
            dy2 = k.grad_output(dy.reshape(-1, w.shape[0]), x2.dtype)
            dx = _shaped(k.grad_input(dy2, w, x2.dtype), *ctx.x_shape) if ctx.needs_input_grad[0] else None
            return dx, *grads(dy2, x2, w, b, ctx.needs_input_grad[1], ctx.needs_input_grad[2]), None, None

    class _SiluMul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, gate_up):
            gu2 = gate_up.reshape(-1, gate_up.shape[-1]).contiguous()
            ctx.save_for_backward(gu2)
            ctx.shape = gate_up.shape
            return _shaped(k.silu_mul(gu2), *gate_up.shape[:-1], gate_up.shape[-1] // 2)

        @staticmethod
        def backward(ctx, dy):
            (gu2,) = ctx.saved_tensors
            dy2 = dy.reshape(gu2.shape[0], gu2.shape[1] // 2).contiguous()
            return _shaped(k.silu_mul_backward(gu2, dy2, False)[0], *ctx.shape)

    class _SiluMulLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, gate_up, w, b, keep_act):
            gu2 = gate_up.reshape(-1, gate_up.shape[-1]).contiguous()
            act = k.silu_mul(gu2)
            ctx.save_for_backward(gu2, w, b, *((act,) if keep_act else ()))
            ctx.shape = gate_up.shape
            return _shaped(k.linear(act, w, b, act.dtype, True), *gate_up.shape[:-1], w.shape[0])

        @staticmethod
        def backward(ctx, dy):
            gu2, w, b, *kept = ctx.saved_tensors
            need_gu, need_w, need_b = ctx.needs_input_grad[:3]
            dy2 = k.grad_output(dy.reshape(-1, w.shape[0]), gu2.dtype)
            act, dgu = (kept[0] if kept else None), None
            if need_gu:  # the product's gradient first: the pass that reads gate_up for it rebuilds the product
                dgu, rebuilt = k.silu_mul_backward(gu2, k.grad_input(dy2, w, gu2.dtype), need_w and act is None)
                act = act if act is not None else rebuilt
            if need_w and act is None:
                act = k.silu_mul(gu2)
            dw, db = grads(dy2, act, w, b, need_w, need_b)
            return (_shaped(dgu, *ctx.shape) if dgu is not None else None), dw, db, None

    def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None, row_parallel: bool = False) -> torch.Tensor:
        """``x [..., K] @ weight[N, K].T (+ bias[N])`` -> [..., N] in ``out_dtype`` (default x.dtype);
        ``row_parallel``: K in the canonical K-groups (a layer whose K tensor parallelism splits)."""
        check_linear(x, weight)
        return run_forward(_Linear, x, weight, bias, out_dtype or x.dtype, row_parallel)

    def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
        """``[..., 2I] -> [..., I]``: silu of the first half times the second half."""
        check_silu_mul(gate_up)
        return run_forward(_SiluMul, gate_up)

    def silu_mul_linear(gate_up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                        keep_act: bool = False) -> torch.Tensor:
        """The MLP's down projection of its SiLU-gated product, ``linear(silu_mul(gate_up), weight,
        bias, row_parallel=True)`` bit for bit, forward and backward. Unless ``keep_act``, the
        product [..., I] is not kept for the backward: the pass of the SiLU-mul backward that reads
        gate_up for its gradient writes it again (after the product's gradient, before the
        weight's), so the rebuild costs no extra read of gate_up."""
        check_silu_mul_linear(gate_up, weight, bias)
        return run_forward(_SiluMulLinear, gate_up, weight, bias, keep_act)

    return linear, silu_mul, silu_mul_linear


def embedding_op(backward: Callable) -> Callable:
    """``embedding(ids, weight)``: forward is a gather (exact); ``backward(ids, grad,
    num_embeddings, dtype) -> dweight`` sums per id in ``canonical.embedding_order``."""

    class _Embedding(torch.autograd.Function):
        @staticmethod
        def forward(ctx, ids, weight):
            ctx.save_for_backward(ids)
            ctx.num, ctx.dtype = weight.shape[0], weight.dtype
            return weight[ids]

        @staticmethod
        def backward(ctx, grad):
            (ids,) = ctx.saved_tensors
            return None, backward(ids, grad, ctx.num, ctx.dtype)

    def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Rows of ``weight`` [V, D] for integer ``ids`` of any shape -> [*ids.shape, D]."""
        check_embedding(ids, weight)
        return run_forward(_Embedding, ids, weight)

    return embedding


def head_ops(shard_stats: Callable, combine_shards: Callable, backward: Callable,
             probs_backward: Callable | None = None, one_shard: Callable | None = None):
    """``(logprob_head, full_logprobs, head_stats)`` of a backend from its ``shard_stats``,
    ``combine_shards`` and ``backward(h, w, targets, lse, mean_logit, vocab_size, g_logp, g_ent,
    need_dw) -> (dh, dw)``, which recomputes the logits. The forward is ``one_shard_stats`` (TP=1
    = one shard), or the backend's ``one_shard`` (its signature, fewer launches, TP=k's bits).

    ``probs_backward(h, w, targets, lse, target_logit, probs, vocab_size, g_logp, need_dw) -> (dh,
    dw)``, where a backend has one, is the backward from the probabilities the forward kept
    (``shard_stats(..., keep_probs=True)``, ``canonical.TileProbs``): no second logits matmul, for
    T x 256 ceil(V / 256) entries in h's dtype held from the forward to the backward. ``logprob_head``
    keeps them when asked (``save_probs``) and a gradient is recorded; a backward that also
    carries an entropy gradient recomputes (it needs the logits themselves, not only p)."""

    def head_stats(h, w, vocab_size, targets, with_entropy=False, keep_logits=False, keep_probs=False,
                   logits_out=None) -> HeadStats:
        """``logits_out``: where a backend's ``one_shard`` writes the kept logits (it returns that
        tensor as ``logits``); the generic path ignores it and keeps a fresh buffer."""
        if one_shard is not None:
            return one_shard(h, w, vocab_size, targets, with_entropy=with_entropy, keep_logits=keep_logits,
                             keep_probs=keep_probs, **({"logits_out": logits_out} if logits_out is not None else {}))
        return one_shard_stats(shard_stats, combine_shards, h, w, vocab_size, targets, with_entropy=with_entropy,
                               keep_logits=keep_logits, keep_probs=keep_probs)

    class _LogprobHead(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h, w, targets, vocab_size, with_entropy, save_probs):
            # save_probs: a gradient is recorded and the backend has probs_backward (the wrapper decided)
            st = head_stats(h, w, vocab_size, targets, with_entropy, keep_probs=save_probs)
            saved = (st.target, *st.probs) if save_probs else ()
            ctx.save_for_backward(h, w, targets, st.lse, st.mean_logit, *saved)
            ctx.vocab_size = vocab_size
            return st.target - st.lse, (st.lse - st.mean_logit if with_entropy else None)

        @staticmethod
        def backward(ctx, g_logp, g_ent):
            h, w, targets, lse, mean_l, *saved = ctx.saved_tensors
            g_logp = torch.zeros_like(lse) if g_logp is None else g_logp.to(torch.float32)
            need_dw = ctx.needs_input_grad[1]
            if saved and g_ent is None:
                target, q, m = saved
                dh, dw = probs_backward(h, w, targets, lse, target, TileProbs(q, m), ctx.vocab_size, g_logp, need_dw)
            else:
                dh, dw = backward(h, w, targets, lse, mean_l, ctx.vocab_size, g_logp, g_ent, need_dw)
            return dh, dw, None, None, None, None

    def logprob_head(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab_size: int,
                     with_entropy: bool = False, save_probs: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """fp32 (log p(targets[t] | hidden[t]) [T], entropy [T] or None) without a [T, V] logits
        tensor. ``save_probs`` (where the backend has a saved-probabilities backward): keep p in
        hidden's dtype for the backward instead of recomputing the logits there."""
        check_targets = check_head(hidden, weight, targets, vocab_size)
        # grad mode is off inside Function.forward, and needs_input_grad ignores no_grad: decide here
        keep = (save_probs and probs_backward is not None and torch.is_grad_enabled()
                and (hidden.requires_grad or weight.requires_grad))
        out = _LogprobHead.apply(hidden, weight, targets.long(), vocab_size, with_entropy, keep)
        check_targets()  # read with the head's kernels queued behind it (no stream drain); raises before returning
        return out

    @torch.no_grad()
    def full_logprobs(hidden: torch.Tensor, weight: torch.Tensor, vocab_size: int,
                      out: torch.Tensor | None = None) -> torch.Tensor:
        """fp32 [T, vocab_size] log-probs; entry [t, v] equals ``logprob_head`` with target v.
        ``out``: a contiguous fp32 [T, vocab_size] tensor on hidden's device to write them into
        (returned); the same values either way."""
        if out is not None:
            want = (hidden.shape[0], vocab_size)
            if tuple(out.shape) != want or out.dtype != torch.float32 or not out.is_contiguous() \
                    or out.device != hidden.device:
                raise ValueError(f"full_logprobs: out must be a contiguous float32 tensor of shape {list(want)} on "
                                 f"{hidden.device}, got {out.dtype} {list(out.shape)} on {out.device}"
                                 f"{'' if out.is_contiguous() else ' (not contiguous)'}")
        st = head_stats(hidden, weight, vocab_size, None, keep_logits=True, logits_out=out)
        if out is None or st.logits is out:  # a fresh buffer, or out itself: subtract in place
            return st.logits.sub_(st.lse[:, None])
        return torch.sub(st.logits, st.lse[:, None], out=out)  # the same subtraction of the same numbers

    return logprob_head, full_logprobs, head_stats


def sum_op(forward: Callable) -> Callable:
    """``token_sum(x)``: a 0-dim fp32 sum of the 1-D fp32 ``x`` in the backend's fixed order
    (``forward(x)``); its gradient is the incoming gradient broadcast back (exact)."""

    class _Sum(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.n = x.shape[0]
            return forward(x)

        @staticmethod
        def backward(ctx, g):
            return g.expand(ctx.n).clone()

    def token_sum(x: torch.Tensor) -> torch.Tensor:
        """Sum of the 1-D float32 ``x`` (e.g. per-token losses) in a fixed order -> 0-dim fp32."""
        if x.dim() != 1 or x.dtype != torch.float32:
            raise ValueError(f"token_sum: x must be 1-D float32, got {tuple(x.shape)} {x.dtype}")
        return _Sum.apply(x)

    return token_sum


# The attribute a gradient buffer carries when its producer left some of its columns for others to fill
_FREE_COLUMNS = "_rlk_free_columns"


def column_buffer(rows: int, width: int, free: tuple[int, int], like: torch.Tensor) -> torch.Tensor:
    """An uninitialised [rows, width] gradient buffer whose columns ``free`` = (start, end) no one has
    written: a producer writes the gradients of some column blocks of a ``split_columns`` input into
    their columns (views of this buffer), and the split's backward fills the free columns with the
    other blocks' gradients and returns the buffer, instead of concatenating copies of all of them."""
    buf = torch.empty(rows, width, dtype=like.dtype, device=like.device)
    setattr(buf, _FREE_COLUMNS, free)
    return buf


# The attribute a split's input carries: its ColumnSlot
_GRAD_SLOT = "_rlk_grad_slot"


class ColumnSlot:
    """The gradient buffer of one ``split_columns`` input [rows, width], shared by the producers of its
    blocks' gradients: the first to ask makes it (``column_buffer``), the others take their columns
    from its free ones. It holds the buffer by a weak reference: the buffer lives as long as a block's
    gradient view of it (until the split's backward returns it), not as long as the graph."""
    __slots__ = ("rows", "width", "_buf")

    def __init__(self, rows: int, width: int):
        self.rows, self.width, self._buf = rows, width, None

    def buffer(self, like: torch.Tensor) -> torch.Tensor:
        buf = self._buf() if self._buf is not None else None
        if buf is None or getattr(buf, _FREE_COLUMNS, None) is None:  # none yet, or filled and returned
            buf = column_buffer(self.rows, self.width, (0, self.width), like)
            self._buf = weakref.ref(buf)
        return buf


def column_block(x: torch.Tensor) -> tuple[torch.Tensor, int, int] | None:
    """(base, first column, width) when ``x`` ([T, ...], each row's elements contiguous) is a block of
    columns of a contiguous 2-D base [T, W] -- a ``split_columns`` block, viewed as [T, H, D] or not
    -- else None."""
    base = x._base
    if base is None or base.dim() != 2 or not base.is_contiguous() or x.dim() < 2 or x.shape[0] != base.shape[0]:
        return None
    n = x[0].numel()
    c0 = x.storage_offset() - base.storage_offset()
    if x.stride(0) != base.shape[1] or not x[0].is_contiguous() or not 0 <= c0 <= base.shape[1] - n:
        return None
    return base, c0, n


def column_slot(x: torch.Tensor) -> tuple[ColumnSlot, int] | None:
    """(the ``ColumnSlot`` of the split input, x's first column) when ``x`` is a block of one
    (``column_block``), else None. Call it in the forward and keep the answer on ctx: a tensor saved
    for backward comes back without its view base (always under ``saved_tensors_hooks``, as the
    decoder's ``rebuild_saved`` runs), so the backward cannot ask."""
    block = column_block(x)
    if block is None:
        return None
    base, c0, _ = block
    slot = getattr(base, _GRAD_SLOT, None)
    if slot is None:
        slot = ColumnSlot(*base.shape)
        setattr(base, _GRAD_SLOT, slot)
    return slot, c0


def shared_column_buffer(block: tuple[ColumnSlot, int] | None, x: torch.Tensor) -> torch.Tensor | None:
    """The [T, ...] view of x's gradient in its split input's shared gradient buffer, at the columns
    ``block`` (``column_slot(x)`` in the forward) names -- the producer that asks first makes the
    buffer (the attention backward, which runs first, writes dv at v's columns; the q/k norm backward
    then dq and dk at theirs) -- with those columns taken from its free ones; None when x is no such
    block or its columns are not free (the caller then makes its own gradient)."""
    if block is None:
        return None
    slot, c0 = block
    n = x[0].numel()
    buf = slot.buffer(x)
    lo, hi = getattr(buf, _FREE_COLUMNS)
    if c0 == lo and c0 + n <= hi:
        setattr(buf, _FREE_COLUMNS, (c0 + n, hi))
    elif c0 + n == hi and c0 >= lo:
        setattr(buf, _FREE_COLUMNS, (lo, c0))
    else:
        return None
    return buf[:, c0:c0 + n].view(x.shape)


class _SplitColumns(torch.autograd.Function):
    """``split_columns``: views forward, ``_join_columns`` backward."""

    @staticmethod
    def forward(ctx, x, sizes):
        ctx.sizes, ctx.shape = sizes, x.shape
        return x.split(sizes, -1)

    @staticmethod
    def backward(ctx, *grads):
        return _join_columns(grads, ctx.sizes, ctx.shape), None


def _join_columns(grads, sizes, shape) -> torch.Tensor:
    """The gradient of x from its blocks' (autograd materialises unused ones as zeros): the
    ``column_buffer`` that already holds some of them at their columns, with the others copied into
    its free columns; else their concatenation."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    buf = next((g._base for g in grads if g._base is not None and getattr(g._base, _FREE_COLUMNS, None)), None)
    if buf is not None and buf.shape == shape:
        placed = [g._base is buf and g.stride() == buf.stride() and g.storage_offset() - buf.storage_offset() == s
                  for g, s in zip(grads, starts, strict=True)]
        rest = [(g, s, n) for g, s, n, p in zip(grads, starts, sizes, placed, strict=True) if not p]
        lo, hi = getattr(buf, _FREE_COLUMNS)
        if all(lo <= s and s + n <= hi for _, s, n in rest):
            setattr(buf, _FREE_COLUMNS, None)  # filled: never written into again
            for g, s, n in rest:
                buf[..., s:s + n].copy_(g)
            return buf
    return torch.cat(grads, -1)


def split_columns(x: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, ...]:
    """``x.split(sizes, -1)`` (views), whose backward returns the one gradient buffer producers wrote
    the blocks' gradients into (``shared_column_buffer``: the Triton attention backward puts dv, the
    q/k norm backward dq and dk, at their columns of the qkv gradient), copying in only the blocks no
    producer placed, else concatenates them as torch's does."""
    if not (torch.is_grad_enabled() and x.requires_grad):
        return x.split(sizes, -1)
    return _SplitColumns.apply(x, list(sizes))
