"""Argument checks shared by every backend's public ops: bad input fails the same way, with a
message naming what is wrong, whichever backend runs. A backend adds only the limits of its own
kernels (e.g. Triton attention's power-of-two head_dim).

Shape checks always run. Checks that read tensor *values* (id and position ranges) need a host
sync, which a CUDA graph being captured cannot do and which an engine's step cannot afford: they
are skipped while the current stream is capturing and inside ``trusted_values()`` -- the vLLM
class runs its forward there, since vLLM has validated the ids and positions it builds (read per
layer, vLLM's positions cost an eager step a host sync a layer: 36 in one traced 8B run) -- and
run everywhere else. Where an op's kernels stay in bounds whatever the values (the head's targets),
the values are read without a sync (``range_later``), after the op's kernels are queued.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator

import torch

_READ: dict[str, tuple[weakref.ref, int, object]] = {}
_TRUSTED = threading.local()


@contextlib.contextmanager
def trusted_values() -> Iterator[None]:
    """Within (this thread), value checks are skipped: for callers whose ids and positions come
    from an engine that validated them (vLLM). Shape checks still run. Nests."""
    _TRUSTED.depth = getattr(_TRUSTED, "depth", 0) + 1
    try:
        yield
    finally:
        _TRUSTED.depth -= 1


def read_once(t: torch.Tensor, what: str, fn: Callable[[torch.Tensor], object]) -> object:
    """``fn(t)``, a host read of ``t``'s values (a sync on a GPU), remembered per ``what`` for the
    last tensor read: the layers of one forward share their positions and ``cu_seqlens`` tensors, so
    they read them from the device once per forward instead of once or twice per layer. Keyed by
    the tensor's identity (a weak reference: a freed tensor never matches) and its in-place
    version counter, so a new or modified tensor is read again. Inference-mode tensors (vLLM's) have
    no version counter: they are read every time."""
    if t.is_inference():
        return fn(t)
    hit = _READ.get(what)
    if hit is not None and hit[0]() is t and hit[1] == t._version:
        return hit[2]
    value = fn(t)
    _READ[what] = (weakref.ref(t), t._version, value)
    return value


def _values_readable(t: torch.Tensor) -> bool:
    if getattr(_TRUSTED, "depth", 0):
        return False
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def _range(t: torch.Tensor) -> tuple[int, int]:
    """(min, max) of a non-empty integer tensor in one host read."""
    lo, hi = torch.stack(torch.aminmax(t)).tolist()
    return int(lo), int(hi)


def range_later(t: torch.Tensor) -> Callable[[], tuple[int, int]]:
    """``_range(t)`` without draining the GPU: (min, max) copied to pinned host memory behind an event, and a
    function that waits for that event only. Called once the op's kernels are queued, the wait ends when the GPU
    reaches the copy, with the op's work still queued behind it -- where a read at the call idles the GPU from the
    read until the host has queued the op's first kernel. A CPU tensor is read now."""
    if not t.is_cuda:
        lo_hi = _range(t)
        return lambda: lo_hi
    host = torch.empty(2, dtype=t.dtype, pin_memory=True)
    host.copy_(torch.stack(torch.aminmax(t)), non_blocking=True)
    copied = torch.cuda.Event()
    copied.record(torch.cuda.current_stream(t.device))  # t's device's stream, which the copy ran on

    def read() -> tuple[int, int]:
        copied.synchronize()
        return int(host[0]), int(host[1])
    return read


@contextlib.contextmanager
def cu_seqlens_read_as(cu_seqlens: torch.Tensor, first_last_longest: tuple[int, int, int]) -> Iterator[None]:
    """Within (this thread), ``read_cu_seqlens(cu_seqlens)`` gives ``first_last_longest`` without reading the
    tensor: a CUDA graph's capture fixes the attention grid of the batches it will replay, which the tensor's
    values at capture need not give (``modeling.logprob_graphs``: the longest sequence any replayed batch may
    hold). Nests; other tensors are read as usual."""
    saved = getattr(_TRUSTED, "cu", None)
    _TRUSTED.cu = (cu_seqlens, tuple(first_last_longest))
    try:
        yield
    finally:
        _TRUSTED.cu = saved


def read_cu_seqlens(cu_seqlens: torch.Tensor) -> tuple[int, int, int]:
    """(first, last, longest sequence) of ``cu_seqlens`` in one host read, once per tensor
    (``read_once``): the bounds check and the attention grid of every layer of a forward share it."""
    given = getattr(_TRUSTED, "cu", None)
    if given is not None and given[0] is cu_seqlens:
        return given[1]
    def read(c: torch.Tensor) -> tuple[int, int, int]:
        if c.numel() < 2:
            return (int(c[0]), int(c[0]), 0) if c.numel() else (0, 0, 0)
        first, last, longest = torch.stack([c[0], c[-1], (c[1:] - c[:-1]).max()]).tolist()
        return int(first), int(last), int(longest)
    return read_once(cu_seqlens, "cu_seqlens", read)


def packed_lengths(cu_seqlens: torch.Tensor, t: int, also: torch.Tensor | None = None) -> tuple[list[int], list[int]]:
    """The sequences' lengths of ``cu_seqlens`` [B+1], checked to rise from 0 to ``t`` (at least one token), and
    ``also``'s values (an int64 vector riding along: a caller's other checks), in one host read. The read seeds
    ``read_cu_seqlens``'s memo, so the attention layers of the same forward read nothing more."""
    if t == 0:
        raise ValueError("input_ids holds no tokens: nothing to score")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must rise from 0 to T={t}, got shape {tuple(cu_seqlens.shape)}")
    host = cu_seqlens.tolist() if also is None else torch.cat([cu_seqlens, also.to(cu_seqlens)]).tolist()
    bounds, rest = host[:cu_seqlens.numel()], host[cu_seqlens.numel():]
    lengths = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    if bounds[0] != 0 or bounds[-1] != t or min(lengths) < 0:
        raise ValueError(f"cu_seqlens must rise from 0 to T={t}, got {bounds}")
    read_once(cu_seqlens, "cu_seqlens", lambda c: (0, t, max(lengths)))  # read_cu_seqlens's value, already known
    return lengths, rest


def check_linear(x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: x has {x.shape[-1]} features, weight expects {weight.shape[1]}")


def check_ids_range(lo: int, hi: int, vocab: int) -> None:
    """Token ids whose (min, max) is (lo, hi) index an embedding of ``vocab`` rows."""
    if lo < 0 or hi >= vocab:
        raise IndexError(f"embedding: token ids must lie in [0, {vocab}), got range [{lo}, {hi}]")


def check_last_position(last: int, table_rows: int) -> None:
    """Position ``last`` (the largest) lies within a RoPE table of ``table_rows`` rows."""
    if last >= table_rows:
        raise IndexError(f"rope: position {last} is past the table ({table_rows} positions = max_position_embeddings)")


def check_embedding(ids: torch.Tensor, weight: torch.Tensor) -> None:
    if ids.numel() and _values_readable(ids):
        check_ids_range(*_range(ids), weight.shape[0])


def check_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.shape[-1] != weight.shape[0]:
        raise ValueError(f"rms_norm: x has last dim {x.shape[-1]}, weight has {weight.shape[0]}")


def check_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    if x.shape != residual.shape or x.dtype != residual.dtype:
        raise ValueError(f"add_rms_norm: x {tuple(x.shape)} {x.dtype} and residual {tuple(residual.shape)} "
                         f"{residual.dtype} must have one shape and dtype")
    check_rms_norm(x, weight)


def check_rms_norm_rope(x: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor, table: torch.Tensor) -> None:
    check_rms_norm(x, weight)
    check_rope(x, positions, table)


def check_silu_mul(gate_up: torch.Tensor) -> None:
    if gate_up.shape[-1] % 2:
        raise ValueError(f"silu_mul: last dim must be even (gate|up), got {gate_up.shape[-1]}")


def check_silu_mul_linear(gate_up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    check_silu_mul(gate_up)
    if weight.dim() != 2 or weight.shape[1] != gate_up.shape[-1] // 2:
        raise ValueError(f"silu_mul_linear: gate_up {tuple(gate_up.shape)} gives {gate_up.shape[-1] // 2} features, "
                         f"weight {tuple(weight.shape)} expects [N, {gate_up.shape[-1] // 2}]")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"silu_mul_linear: bias {tuple(bias.shape)} does not match weight's {weight.shape[0]} outputs")


def check_rope(x: torch.Tensor, positions: torch.Tensor, table: torch.Tensor) -> None:
    if x.dim() != 3 or x.shape[-1] != table.shape[-1] or positions.shape != x.shape[:1]:
        raise ValueError(f"rope: x {tuple(x.shape)}, positions {tuple(positions.shape)}, "
                         f"table {tuple(table.shape)} do not match ([T, H, D], [T], [P, D])")
    if positions.numel() and _values_readable(positions):
        check_last_position(read_once(positions, "rope positions", lambda t: int(t.max())), table.shape[0])


def check_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor) -> None:
    if q.dim() != 3 or k.shape != v.shape or k.dim() != 3 or k.shape[0] != q.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
                         "must be [T, Hq, D], [T, Hkv, D], [T, Hkv, D]")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"attention: {q.shape[1]} query heads is not a multiple of {k.shape[1]} KV heads")
    if _values_readable(cu_seqlens) and read_cu_seqlens(cu_seqlens)[:2] != (0, q.shape[0]):
        raise ValueError(f"attention: cu_seqlens must run from 0 to T={q.shape[0]}")


def check_paged_attention(q: torch.Tensor, kv_cache: torch.Tensor) -> None:
    if q.dim() != 3 or kv_cache.dim() != 4 or kv_cache.shape[3] != 2 * q.shape[2] or q.shape[1] % kv_cache.shape[1]:
        raise ValueError(f"paged attention: q {tuple(q.shape)} does not fit kv_cache {tuple(kv_cache.shape)} "
                         "([T, Hq, D] and [blocks, Hkv, block_size, 2*D], Hkv dividing Hq)")


def check_head(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
               vocab_size: int) -> Callable[[], None]:
    """The head's shape checks, now; returns the targets' range check, to call once the head's kernels are
    queued (``range_later``: no host sync on a GPU -- the head's kernels never index memory by a target, they
    compare ids with their vocab tiles, so out-of-range targets only give a wrong result, which this raises on
    before it is returned)."""
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"logprob_head: hidden {tuple(hidden.shape)} and targets "
                         f"{tuple(targets.shape)} must be [T, K] and [T]")
    if weight.shape[0] < vocab_size or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"logprob_head: weight {tuple(weight.shape)} must be [>= {vocab_size}, {hidden.shape[1]}]")
    if not (targets.numel() and _values_readable(targets)):
        return lambda: None
    read = range_later(targets)

    def check() -> None:
        lo, hi = read()
        if lo < 0 or hi >= vocab_size:
            raise IndexError(f"logprob_head: targets must lie in [0, {vocab_size}), got range [{lo}, {hi}]")
    return check
