"""The contract's ops as torch custom ops (``torch.library``), for torch.compile.

torch.compile must not look inside a contract op: Dynamo cannot trace the Triton launchers (host
logic, tensor descriptors, checks that read device values), and Inductor, given the reference
backend's torch code, would fuse and reorder its reductions -- other bits. Each op here is one
``rlk::<op>`` custom op taking the backend's name; its real implementation calls that backend,
and a fake implementation gives the output's shape and dtype for tracing. The compiled graph
therefore holds the same kernels in the same order as eager execution, and Inductor only
compiles the glue around them (views), where it rounds exactly as eager does.

``get_backend("opaque:NAME")`` returns an ``OpaqueBackend``: NAME's interface with these ops in
place of the ones a compiled forward calls (linear, RMSNorm and residual add + RMSNorm, RoPE,
the q/k norms + RoPE, SiLU-mul, the row-parallel partials and their combination); every other op (attention, which
vLLM runs inside its own opaque op; the log-prob head, outside the compiled region) is NAME's own. Inference only: the
custom ops have no autograd (the training class calls its backend directly).
"""

from __future__ import annotations

from types import ModuleType

import torch

from . import OPAQUE, get_backend


@torch.library.custom_op("rlk::linear", mutates_args=())
def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype | None,
            row_parallel: bool, backend: str) -> torch.Tensor:
    return get_backend(backend).linear(x, weight, bias, out_dtype, row_parallel)


@_linear.register_fake
def _(x, weight, bias, out_dtype, row_parallel, backend):
    return x.new_empty(*x.shape[:-1], weight.shape[0], dtype=out_dtype or x.dtype)


@torch.library.custom_op("rlk::rms_norm", mutates_args=())
def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, backend: str) -> torch.Tensor:
    return get_backend(backend).rms_norm(x, weight, eps)


@_rms_norm.register_fake
def _(x, weight, eps, backend):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("rlk::add_rms_norm", mutates_args=())
def _add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                  backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    return get_backend(backend).add_rms_norm(x, residual, weight, eps)


@_add_rms_norm.register_fake
def _(x, residual, weight, eps, backend):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))


@torch.library.custom_op("rlk::rope", mutates_args=())
def _rope(x: torch.Tensor, positions: torch.Tensor, table: torch.Tensor, backend: str) -> torch.Tensor:
    return get_backend(backend).rope(x, positions, table)


@_rope.register_fake
def _(x, positions, table, backend):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("rlk::rms_norm_rope", mutates_args=())
def _rms_norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, positions: torch.Tensor, table: torch.Tensor,
                   backend: str) -> torch.Tensor:
    return get_backend(backend).rms_norm_rope(x, weight, eps, positions, table)


@_rms_norm_rope.register_fake
def _(x, weight, eps, positions, table, backend):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("rlk::qk_norm_rope", mutates_args=())
def _qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                  positions: torch.Tensor, table: torch.Tensor, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    return get_backend(backend).qk_norm_rope(q, k, q_weight, k_weight, eps, positions, table)


@_qk_norm_rope.register_fake
def _(q, k, q_weight, k_weight, eps, positions, table, backend):
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format))


@torch.library.custom_op("rlk::silu_mul", mutates_args=())
def _silu_mul(gate_up: torch.Tensor, backend: str) -> torch.Tensor:
    return get_backend(backend).silu_mul(gate_up)


@_silu_mul.register_fake
def _(gate_up, backend):
    return gate_up.new_empty(*gate_up.shape[:-1], gate_up.shape[-1] // 2)


@torch.library.custom_op("rlk::shard_partial", mutates_args=())
def _shard_partial(x: torch.Tensor, w_shard: torch.Tensor, tp_size: int, backend: str) -> torch.Tensor:
    return get_backend(backend).shard_partial(x, w_shard, tp_size)


@_shard_partial.register_fake
def _(x, w_shard, tp_size, backend):
    p = get_backend(backend).partials_per_rank(tp_size)
    return x.new_empty(p, *x.shape[:-1], w_shard.shape[0], dtype=torch.float32)


@torch.library.custom_op("rlk::combine_partials", mutates_args=())
def _combine_partials(parts: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype,
                      backend: str) -> torch.Tensor:
    return get_backend(backend).combine_partials(parts, bias, out_dtype)


@_combine_partials.register_fake
def _(parts, bias, out_dtype, backend):
    return parts.new_empty(parts.shape[2:], dtype=out_dtype)


# ops of a backend that a compiled forward must not see: ``linear_unfolded`` returns ``canonical.Partials`` for the
# next eager add_rms_norm (the vLLM class at TP=1), which ``rlk::add_rms_norm`` cannot take; a compiled forward's
# row-parallel layer folds in ``rlk::linear``
EAGER_ONLY = frozenset({"linear_unfolded"})


class OpaqueBackend:
    """A backend's interface with the ops a compiled forward calls routed through ``rlk::*``."""

    def __init__(self, backend: ModuleType):
        self._backend = backend
        self.NAME = backend.NAME

    def __getattr__(self, item):  # every other op, constant and FINGERPRINT: the backend's own
        if item in EAGER_ONLY:
            raise AttributeError(f"{item!r}: not in a compiled forward ({OPAQUE}{self.NAME}); "
                                 "its result is no tensor a custom op could take")
        return getattr(self._backend, item)

    def linear(self, x, weight, bias=None, out_dtype=None, row_parallel=False):
        return torch.ops.rlk.linear(x, weight, bias, out_dtype, row_parallel, self.NAME)

    def rms_norm(self, x, weight, eps):
        return torch.ops.rlk.rms_norm(x, weight, eps, self.NAME)

    def add_rms_norm(self, x, residual, weight, eps):
        return torch.ops.rlk.add_rms_norm(x, residual, weight, eps, self.NAME)

    def rope(self, x, positions, table):
        return torch.ops.rlk.rope(x, positions, table, self.NAME)

    def rms_norm_rope(self, x, weight, eps, positions, table):
        return torch.ops.rlk.rms_norm_rope(x, weight, eps, positions, table, self.NAME)

    def qk_norm_rope(self, q, k, q_weight, k_weight, eps, positions, table):
        return torch.ops.rlk.qk_norm_rope(q, k, q_weight, k_weight, eps, positions, table, self.NAME)

    def silu_mul(self, gate_up):
        return torch.ops.rlk.silu_mul(gate_up, self.NAME)

    def shard_partial(self, x, w_shard, tp_size):
        return torch.ops.rlk.shard_partial(x, w_shard, tp_size, self.NAME)

    def combine_partials(self, parts, bias, out_dtype):
        return torch.ops.rlk.combine_partials(parts, bias, out_dtype, self.NAME)
