"""Deterministic, batch-invariant ops behind one interface (see CONTRACT.md).

A backend is a module exposing the functions of ``Backend``; models hold the backend they
were built with (``config.rlk_backend``), so the choice is explicit per model and never a
process-wide switch. A backend that is requested but cannot run here raises.

Layers: ``canonical`` (what every backend agrees on: K-groups, the canonical padded vocab and its
shards, stats records), ``checks`` (argument checks for every op), ``autograd`` (shared autograd
glue); the backends ``reference`` and ``triton`` build on those three and never on each other.
``fingerprint`` and ``selftest`` check a backend's contract per checkpoint and per machine;
``library`` exposes a backend's ops as torch custom ops for torch.compile (``opaque:NAME``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Protocol

import torch

from .canonical import ShardStats
from .rope_table import UnsupportedRope, rope_table

_BACKENDS = {"reference": "rlk_models.ops.reference", "triton": "rlk_models.ops.triton"}


class Backend(Protocol):
    """What a backend module provides: its ops (below), ``NAME``, ``FINGERPRINT`` (a dict of
    everything that decides its bits: contract version and tile/group constants) and
    ``is_available() -> (ok, why)``.

    Tensor parallelism (row-parallel linears): ``shard_partial`` gives a rank's fp32 partials
    [P, ..., N] of its K-slice, ``combine_partials`` finishes the sum from all ranks' partials
    stacked in rank order [k, P, ..., N]. At TP=2 every backend must make a rank's partial one
    tensor (P = 1) whose sum with the other rank's, p0 + p1, is the canonical result: one fp32
    addition, which any all-reduce of two values computes bit for bit (IEEE addition is
    commutative), so vLLM all-reduces it instead of gathering.

    Optional: ``linear_unfolded(x, weight, bias)``, the row-parallel linear at TP=1 for inference with its
    split-K fold left to the next ``add_rms_norm`` (``canonical.Partials``, which that backend's ``add_rms_norm``
    takes as x): the same bits, a launch fewer per row-parallel layer where the linear splits K (triton; the vLLM
    class uses it when the backend has it)."""

    NAME: str

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None, row_parallel: bool = False) -> torch.Tensor: ...
    def embedding(self, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor: ...
    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor: ...
    # the decoder's residual add and the next norm in one pass: (rms_norm(s), s) for s = x + residual
    # (one rounding to x's dtype), bit for bit the two ops apart
    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
                     ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def rope(self, x: torch.Tensor, positions: torch.Tensor, table: torch.Tensor) -> torch.Tensor: ...
    # Qwen3's per-head q/k norm and RoPE in one pass: rope(rms_norm(x, weight, eps), positions, table),
    # bit for bit the two ops apart
    def rms_norm_rope(self, x: torch.Tensor, weight: torch.Tensor, eps: float, positions: torch.Tensor,
                      table: torch.Tensor) -> torch.Tensor: ...
    # both of a layer's q and k norms + RoPE: (rms_norm_rope(q, ...), rms_norm_rope(k, ...)), bit for bit;
    # one launch where the backend can (q and k adjacent in the qkv rows)
    def qk_norm_rope(self, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                     eps: float, positions: torch.Tensor, table: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor: ...
    # the MLP's down projection of its SiLU-gated product: linear(silu_mul(gate_up), weight, bias,
    # row_parallel=True), bit for bit; unless keep_act, the product is rebuilt in the backward by the
    # pass that reads gate_up for its gradient (training)
    def silu_mul_linear(self, gate_up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                        keep_act: bool = False) -> torch.Tensor: ...
    def varlen_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         cu_seqlens: torch.Tensor, scale: float) -> torch.Tensor: ...
    def write_kv(self, kv_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 slot_mapping: torch.Tensor) -> None: ...
    def paged_attention(self, q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                        seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float,
                        out: torch.Tensor | None = None) -> torch.Tensor: ...
    # save_probs: where the backend has a backward from kept probabilities (triton), keep them from
    # the forward instead of recomputing the logits in the backward (T x V in hidden's dtype)
    def logprob_head(self, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                     vocab_size: int, with_entropy: bool = False, save_probs: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor | None]: ...
    # out: an fp32 [T, vocab_size] buffer to write into (the vLLM class's head graphs share one)
    def full_logprobs(self, hidden: torch.Tensor, weight: torch.Tensor, vocab_size: int,
                      out: torch.Tensor | None = None) -> torch.Tensor: ...
    # tensor parallelism: canonical K segments of row-parallel GEMMs and vocab groups of the head
    def partials_per_rank(self, tp_size: int) -> int: ...
    def shard_partial(self, x: torch.Tensor, w_shard: torch.Tensor, tp_size: int) -> torch.Tensor: ...
    def combine_partials(self, parts: torch.Tensor, bias: torch.Tensor | None,
                         out_dtype: torch.dtype) -> torch.Tensor: ...
    def shard_stats(self, h: torch.Tensor, w_shard: torch.Tensor, shard: tuple[int, int], vocab_size: int,
                    targets: torch.Tensor | None, *, with_entropy: bool, keep_logits: bool = False) -> ShardStats: ...
    def combine_shards(self, m: torch.Tensor, s: torch.Tensor, e: torch.Tensor, tgt: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
    # the training loss: a fixed-order sum of per-token values
    def token_sum(self, x: torch.Tensor) -> torch.Tensor: ...


class BackendUnavailable(RuntimeError):
    pass


_REQUIRED = [n for n in Backend.__dict__ if not n.startswith("_")] + ["NAME", "FINGERPRINT", "is_available"]


# name -> loaded backend. A plain dict rather than functools.cache: torch.compile (Dynamo) traces
# get_backend inside a compiled model, and a dict lookup is all it sees once a backend is loaded
_LOADED: dict[str, Backend | ModuleType] = {}
OPAQUE = "opaque:"  # get_backend("opaque:NAME"): NAME's ops as torch custom ops (ops/library.py)


def register_backend(name: str, module: str) -> None:
    """Make the backend module ``module`` (import path) selectable as ``rlk_backend=name``.
    Third-party and test backends use this; the model config still names the backend."""
    _BACKENDS[name] = module
    _LOADED.pop(name, None)
    _LOADED.pop(OPAQUE + name, None)


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


def get_backend(name: str) -> Backend | ModuleType:
    """The op backend called ``name``; raises if unknown or unavailable on this machine.
    ``opaque:NAME``: the same ops, each one torch custom op that torch.compile cannot look into."""
    mod = _LOADED.get(name)
    if mod is None:
        mod = _LOADED[name] = _load(name)
    return mod


def _load(name: str) -> Backend | ModuleType:
    if name.startswith(OPAQUE):
        from .library import OpaqueBackend

        return OpaqueBackend(get_backend(name[len(OPAQUE):]))
    if name not in _BACKENDS:
        raise BackendUnavailable(f"unknown op backend {name!r}; known: {available_backends()}")
    mod = importlib.import_module(_BACKENDS[name])
    missing = [op for op in _REQUIRED if not hasattr(mod, op)]
    if missing:
        raise BackendUnavailable(f"op backend {name!r} ({_BACKENDS[name]}) lacks {missing}")
    ok, why = mod.is_available()
    if not ok:
        raise BackendUnavailable(f"op backend {name!r} is not available here: {why}")
    return mod


__all__ = ["Backend", "BackendUnavailable", "UnsupportedRope", "available_backends", "get_backend",
           "register_backend", "rope_table"]
