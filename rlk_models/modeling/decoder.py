"""The shared decoder stack over packed tokens: one definition for training and rollout.

Tokens of all sequences are packed: hidden states are [T, D], with ``positions [T]`` and
an ``AttentionMeta`` that only the inner attention reads. What differs between the HF training
class and the vLLM class is injected through a ``Builder``: how linears, the embedding and the
inner attention are made (``TrainingBuilder``: plain parameters, and an inner attention that is
varlen over packed sequences or reads a paged KV cache -- the training class's ``generate()`` and
``testing.paged_runner`` -- through the same backend ops vLLM's attention backend calls;
``modeling.vllm.VllmBuilder``: vLLM's tensor-parallel layers and paged attention). The arithmetic around them
-- norms, RoPE, SiLU-mul, residual adds in the model dtype (each inside the next norm's op,
``add_rms_norm``) -- is written once, here, with the op backend.

Qwen3 = Llama + per-head q/k RMSNorm before RoPE (``config.rlk_qk_norm``; both norms and rotations run as
one op, ``qk_norm_rope``) + explicit head_dim.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer

from ..ops import get_backend, rope_table
from ..ops.autograd import split_columns
from .config import rope_parameters


class Linear(nn.Module):
    """Training-side linear: parameters plus the backend's linear. ``row_parallel``: K is the
    dimension tensor parallelism splits (o_proj, down_proj), reduced in canonical K-groups."""

    def __init__(self, in_features: int, out_features: int, bias: bool, backend: str, row_parallel: bool = False):
        super().__init__()
        self.backend, self.row_parallel = backend, row_parallel
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return get_backend(self.backend).linear(x, self.weight, self.bias, row_parallel=self.row_parallel)


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, dim: int, backend: str):
        super().__init__()
        self.backend = backend
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return get_backend(self.backend).embedding(ids, self.weight)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, backend: str):
        super().__init__()
        self.backend, self.eps = backend, eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """RMSNorm(x); with ``residual``: (RMSNorm(x + residual), x + residual) in one op. (Qwen3's
        q/k norms hold only weights here: ``Attention`` runs both, with RoPE, as ``qk_norm_rope``.)"""
        ops = get_backend(self.backend)
        if residual is None:
            return ops.rms_norm(x, self.weight, self.eps)
        return ops.add_rms_norm(x, residual, self.weight, self.eps)


@dataclass(frozen=True)
class VarlenMeta:
    """Attention metadata of the training path: sequence s is tokens cu_seqlens[s]:cu_seqlens[s+1]."""
    cu_seqlens: torch.Tensor


@dataclass(frozen=True)
class PagedMeta:
    """One step through paged caches outside vLLM (``generate()``, ``testing.paged_runner``)."""
    caches: list[torch.Tensor]      # per layer [num_blocks, Hkv, block_size, 2 D]
    block_table: torch.Tensor       # [R, max_blocks] int32
    seq_lens: torch.Tensor          # [R] context length after this step
    query_start_loc: torch.Tensor   # [R + 1]
    slot_mapping: torch.Tensor      # [T]


@dataclass(frozen=True)
class VllmContextMeta:
    """Inside vLLM: its attention layers read the step's metadata from vLLM's forward context."""


AttentionMeta = VarlenMeta | PagedMeta | VllmContextMeta


class Builder(Protocol):
    """Makes the decoder's parametrised layers and its inner attention (see module docstring)."""
    tp_size: int

    def embedding(self, vocab_size: int, dim: int, prefix: str) -> nn.Module: ...
    def qkv(self, hidden: int, head_dim: int, n_heads: int, n_kv_heads: int, bias: bool, prefix: str) -> nn.Module: ...
    def merged(self, in_features: int, out_sizes: list[int], bias: bool, prefix: str) -> nn.Module: ...
    def row(self, in_features: int, out_features: int, bias: bool, prefix: str) -> nn.Module: ...
    def attention(self, layer_idx: int, n_heads: int, n_kv_heads: int, head_dim: int, scale: float,
                  prefix: str) -> nn.Module: ...


class PackedAttention(nn.Module):
    """Training-side inner attention: causal within each packed sequence (``VarlenMeta``), or one
    step against paged KV caches (``PagedMeta``: write this step's K/V by slot, then attend over
    each sequence's context) -- the backend's ``write_kv`` and ``paged_attention``, which give
    the varlen path's bits for every token (the contract's prefix invariance)."""

    def __init__(self, layer_idx: int, scale: float, backend: str):
        super().__init__()
        self.layer_idx, self.scale, self.backend = layer_idx, scale, backend

    def forward(self, q, k, v, meta: VarlenMeta | PagedMeta):
        ops = get_backend(self.backend)
        if isinstance(meta, VarlenMeta):
            return ops.varlen_attention(q, k, v, meta.cu_seqlens, self.scale)
        cache = meta.caches[self.layer_idx]
        ops.write_kv(cache, k, v, meta.slot_mapping)
        return ops.paged_attention(q, cache, meta.block_table, meta.seq_lens, meta.query_start_loc, self.scale)


class TrainingBuilder:
    """``Builder`` of the training class (tensor-parallel size 1, plain parameters)."""
    tp_size = 1

    def __init__(self, backend: str):
        self.backend = backend

    def embedding(self, vocab_size, dim, prefix):
        return Embedding(vocab_size, dim, self.backend)

    def qkv(self, hidden, head_dim, n_heads, n_kv_heads, bias, prefix):
        return Linear(hidden, (n_heads + 2 * n_kv_heads) * head_dim, bias, self.backend)

    def merged(self, in_features, out_sizes, bias, prefix):
        return Linear(in_features, sum(out_sizes), bias, self.backend)

    def row(self, in_features, out_features, bias, prefix):
        return Linear(in_features, out_features, bias, self.backend, row_parallel=True)

    def attention(self, layer_idx, n_heads, n_kv_heads, head_dim, scale, prefix):
        return PackedAttention(layer_idx, scale, self.backend)


class Attention(nn.Module):
    def __init__(self, config, build: Builder, prefix: str, layer_idx: int):
        super().__init__()
        self.backend = config.rlk_backend
        d, hq, hkv = config.head_dim, config.num_attention_heads, config.num_key_value_heads
        self.head_dim = d
        self.n_heads = hq // build.tp_size
        self.n_kv_heads = max(1, hkv // build.tp_size)
        bias = config.attention_bias
        self.qkv_proj = build.qkv(config.hidden_size, d, hq, hkv, bias, f"{prefix}.qkv_proj")
        self.o_proj = build.row(hq * d, config.hidden_size, bias, f"{prefix}.o_proj")
        qk_norm = config.rlk_qk_norm  # Qwen3: per-head RMSNorm of q and k before RoPE
        self.q_norm = RMSNorm(d, config.rms_norm_eps, self.backend) if qk_norm else None
        self.k_norm = RMSNorm(d, config.rms_norm_eps, self.backend) if qk_norm else None
        self.attn = build.attention(layer_idx, self.n_heads, self.n_kv_heads, d, d ** -0.5, f"{prefix}.attn")

    def forward(self, x_TD, positions_T, rope_PD, meta: AttentionMeta):
        ops, T, d = get_backend(self.backend), x_TD.shape[0], self.head_dim
        qkv = self.qkv_proj(x_TD)
        # split_columns: its backward returns the gradient buffer attention's and the q/k norm's backward filled
        q, k, v = split_columns(qkv, [self.n_heads * d, self.n_kv_heads * d, self.n_kv_heads * d])
        q_TNH, k_TKH, v_TKH = q.view(T, -1, d), k.view(T, -1, d), v.view(T, -1, d)
        if self.q_norm is not None:  # Qwen3: each head's norm and its rotation, q's and k's in one op
            q_TNH, k_TKH = ops.qk_norm_rope(q_TNH, k_TKH, self.q_norm.weight, self.k_norm.weight, self.q_norm.eps,
                                            positions_T, rope_PD)
        else:
            q_TNH = ops.rope(q_TNH, positions_T, rope_PD)
            k_TKH = ops.rope(k_TKH, positions_T, rope_PD)
        o_TNH = self.attn(q_TNH, k_TKH, v_TKH, meta)
        return self.o_proj(o_TNH.reshape(T, self.n_heads * d))


class _Rebuild:
    """A tensor an op saved for backward, dropped: ``fn()`` makes it again when the backward reads it."""
    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], torch.Tensor]):
        self.fn = fn


def rebuild_saved(target: torch.Tensor, rebuild: Callable[[], torch.Tensor], on: bool = True):
    """``saved_tensors_hooks`` under which a tensor that an op saves for its backward and that *is*
    ``target`` (its storage, offset, shape, strides and dtype: e.g. a linear's reshape of its
    input) is not kept but rebuilt by ``rebuild()``, under no_grad, when the backward reads it.
    ``rebuild`` must rerun the deterministic op that made ``target``, so the backward sees the
    same bits; every other saved tensor is kept as usual. A no-op context unless ``on``, this
    forward records a graph (``rebuilding``) and ``target`` is part of it."""
    if not (target.requires_grad and rebuilding(on)):
        return contextlib.nullcontext()

    def layout(t: torch.Tensor) -> tuple | None:
        try:
            return t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride(), t.dtype, t.device
        except (RuntimeError, NotImplementedError):  # a tensor without plain storage (a subclass): kept
            return None

    key = layout(target)

    def pack(t: torch.Tensor):
        return _Rebuild(rebuild) if key is not None and layout(t) == key else t
    pack.rlk_rebuild = True  # ours: rebuilding() may nest another inside it

    def unpack(saved):
        if isinstance(saved, _Rebuild):
            with torch.no_grad():
                return saved.fn()
        return saved

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def rebuilding(on: bool) -> bool:
    """Whether this forward drops activations that the backward can rebuild (``rebuild_saved``):
    only when it records a graph for a backward, and not under someone else's saved-tensor hooks
    (a non-reentrant checkpoint, activation offloading): ours would take their place for the
    region's every saved tensor, and keep what they would have freed or moved."""
    if not (on and torch.is_grad_enabled()):
        return False
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if top is None:  # cannot tell: keep the activations
        return False
    hooks = top(False)
    return hooks is None or getattr(hooks[0], "rlk_rebuild", False)


class MLP(nn.Module):
    """Training (the builder's down projection is a plain ``Linear``): SiLU-mul and the down
    projection run as one op, ``silu_mul_linear`` -- the same bits as the two apart, with
    ``config.rlk_rebuild_activations`` the product SiLU(gate) * up [T, intermediate] not kept for
    the backward but written again by the SiLU-mul backward's pass over gate_up (at Qwen3-1.7B, 8 x
    2048 tokens: 5.4 GB a step less, and no extra read of gate_up). When ``down_proj`` is observed
    (hooks, a replaced forward: ``observed``) it is called as a module instead, after ``silu_mul``.
    Inside vLLM: ``silu_mul`` then the row-parallel layer."""

    def __init__(self, config, build: Builder, prefix: str):
        super().__init__()
        self.backend = config.rlk_backend
        self.rebuild_act = getattr(config, "rlk_rebuild_activations", True)
        bias = getattr(config, "mlp_bias", False)
        inter = config.intermediate_size
        self.gate_up_proj = build.merged(config.hidden_size, [inter, inter], bias, f"{prefix}.gate_up_proj")
        self.down_proj = build.row(inter, config.hidden_size, bias, f"{prefix}.down_proj")

    def forward(self, x_TD):
        ops = get_backend(self.backend)
        gate_up = self.gate_up_proj(x_TD)
        down = self.down_proj
        if type(down) is Linear and not observed(down):
            return ops.silu_mul_linear(gate_up, down.weight, down.bias, keep_act=not self.rebuild_act)
        return down(ops.silu_mul(gate_up))


def observed(m: nn.Module) -> bool:
    """Whether calling ``m`` runs more than its class's forward: hooks on it or on every module
    (``rlk-bisect``'s records, a user's), or a forward replaced on the instance. Then the MLP calls
    it as two ops, so they see its input and output (keeping the product for the backward), and the
    vLLM class's row-parallel layer folds its own output (no ``canonical.Partials`` for a hook)."""
    M = nn.modules.module
    return bool(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
                or M._global_forward_hooks or M._global_forward_pre_hooks or M._global_backward_hooks
                or M._global_backward_pre_hooks or "forward" in vars(m))


class DecoderLayer(GradientCheckpointingLayer):
    """With ``config.rlk_rebuild_activations`` (training): each norm's output -- the saved input of
    the qkv and gate_up projections -- is rebuilt in the backward from the residual stream the norm
    op saves anyway (rms_norm of it: the fused add + norm's bits, CONTRACT.md) instead of kept:
    2 x T x hidden activations less a layer."""

    def __init__(self, config, build: Builder, prefix: str, layer_idx: int):
        super().__init__()
        self.rebuild_norms = getattr(config, "rlk_rebuild_activations", True)
        eps, b = config.rms_norm_eps, config.rlk_backend
        self.input_layernorm = RMSNorm(config.hidden_size, eps, b)
        self.self_attn = Attention(config, build, f"{prefix}.self_attn", layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, b)
        self.mlp = MLP(config, build, f"{prefix}.mlp")

    def forward(self, out_TD, residual_TD, positions_T, rope_PD, meta: AttentionMeta):
        """The residual stream is carried as (the last block's output, the stream before it) and each
        residual add runs inside the next norm's op (``add_rms_norm``): h + attn(norm(h)), then
        + mlp(...), with the adds' and the norms' bits in one launch per add and norm instead of
        two. The first layer gets (embedding, None); returns (this layer's MLP output, the stream
        before it)."""
        if residual_TD is None:
            x_TD, residual_TD = self.input_layernorm(out_TD), out_TD
        else:
            x_TD, residual_TD = self.input_layernorm(out_TD, residual_TD)
        with self._rebuilt(x_TD, self.input_layernorm, residual_TD):
            attn_TD = self.self_attn(x_TD, positions_T, rope_PD, meta)
        x_TD, residual_TD = self.post_attention_layernorm(attn_TD, residual_TD)
        with self._rebuilt(x_TD, self.post_attention_layernorm, residual_TD):
            return self.mlp(x_TD), residual_TD

    def _rebuilt(self, normed_TD: torch.Tensor, norm: RMSNorm, stream_TD: torch.Tensor):
        """Hooks that drop ``normed_TD`` (= norm(stream)) where the next projection saves it; the
        norm's weight is read when the backward rebuilds it (FSDP2 has gathered it again then)."""
        stream = stream_TD.detach()
        return rebuild_saved(normed_TD, lambda: get_backend(norm.backend).rms_norm(stream, norm.weight, norm.eps),
                             self.rebuild_norms)


class Decoder(nn.Module):
    """Embedding -> layers -> final norm over packed tokens; returns hidden states [T, D]."""

    def __init__(self, config, build: Builder, prefix: str = "model"):
        super().__init__()
        self.config = config
        self.embed_tokens = build.embedding(config.vocab_size, config.hidden_size, f"{prefix}.embed_tokens")
        self.layers = nn.ModuleList(
            DecoderLayer(config, build, f"{prefix}.layers.{i}", i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, config.rlk_backend)
        self._rope: dict[torch.device, torch.Tensor] = {}

    def rope_table(self, device: torch.device) -> torch.Tensor:
        """fp32 [max_position_embeddings, head_dim] cos|sin table, built lazily per device (it
        is never a parameter or buffer, so meta-device init and checkpoints cannot touch it), and
        outside inference mode whatever the first caller's: an inference tensor cannot be saved for
        a later training pass's backward (an RL step's first pass is often the old policy's, under
        ``torch.inference_mode``)."""
        if device not in self._rope:
            c = self.config
            with torch.inference_mode(False):
                self._rope[device] = rope_table(c.head_dim, c.max_position_embeddings, rope_parameters(c)).to(device)
        return self._rope[device]

    def forward(self, input_ids_T: torch.Tensor | None, positions_T: torch.Tensor, meta: AttentionMeta,
                inputs_embeds_TD: torch.Tensor | None = None) -> torch.Tensor:
        h_TD = self.embed_tokens(input_ids_T) if inputs_embeds_TD is None else inputs_embeds_TD
        rope_PD = self.rope_table(h_TD.device)
        residual_TD = None
        for layer in self.layers:
            h_TD, residual_TD = layer(h_TD, residual_TD, positions_T, rope_PD, meta)
        return self.norm(h_TD) if residual_TD is None else self.norm(h_TD, residual_TD)[0]
