"""vLLM class over the shared packed decoder.

vLLM's own layers do what they are good at -- tensor-parallel weight creation, sharding and
loading (``QKVParallelLinear``, ``MergedColumnParallelLinear``, ``RowParallelLinear``,
``VocabParallelEmbedding``, ``ParallelLMHead``) and the paged KV cache -- while every number
comes from the op backend the training class uses: each layer's ``quant_method`` is swapped for
``RLKLinearMethod`` (no CPU prepacking, which would replace ``weight``), attention is forced to
``RLKAttentionBackend``, and ``compute_logits`` returns the log-prob head's fp32 log-probs.

Log-probs contract: vLLM must run with ``logprobs_mode="raw_logits"`` so that the log-probs it
reports are exactly ``compute_logits``' values (the default ``raw_logprobs`` re-normalises them
with torch's log_softmax, changing the last bits). vLLM builds its sampler before it builds the
model, so a model cannot switch the mode itself: the class fails closed at load with the flag
to pass. Sampling is unaffected (softmax of log-probs = softmax of logits).

Compilation (opt-in, ``rlk_compile``): the decoder is a ``support_torch_compile`` class whose
layers call the op backend as ``opaque:NAME`` -- every contract op one ``rlk::*`` torch custom op
(``ops.library``) -- so vLLM's torch.compile sees each op as an opaque call and compiles only the
glue between them; attention is vLLM's own opaque op. Off, the class runs eagerly as before.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
from collections.abc import Iterable

import torch
from torch import nn
from vllm.compilation.decorators import support_torch_compile
from vllm.distributed import (
    get_pp_group,
    get_tensor_model_parallel_rank,
    get_tensor_model_parallel_world_size,
    tensor_model_parallel_all_gather,
    tensor_model_parallel_all_reduce,
)
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.linear import (
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
    UnquantizedLinearMethod,
)
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    UnquantizedEmbeddingMethod,
    VocabParallelEmbedding,
)
from vllm.model_executor.model_loader.weight_utils import default_weight_loader

from ..conversion.maps import FUSION_HINT, IGNORED_SUFFIXES
from ..ops import OPAQUE, get_backend
from ..ops.canonical import padded_vocab, vocab_shard
from ..ops.checks import trusted_values
from ..ops.fingerprint import check_fingerprint
from ..ops.selftest import maybe_require
from .config import validate_config
from .decoder import Decoder, VllmContextMeta, observed
from .head_graphs import HEAD_GRAPH_ROWS, HeadGraphs
from .vllm_attention import RLKAttentionBackend

log = logging.getLogger(__name__)

# Benchmarks only (benchmarks/vllm_cuda.py --engines rlk_allreduce): row-parallel layers at TP > 1
# round each rank's partial product to the activation dtype and all-reduce it, as stock vLLM does.
# That is *not* the contract -- the sum's order and rounding depend on the TP degree -- and exists
# to measure what the canonical all-gather + fixed-order combine costs against it.
PLAIN_ALL_REDUCE_ENV = "RLK_BENCH_PLAIN_ALL_REDUCE"


@functools.cache
def _plain_all_reduce() -> bool:
    on = os.environ.get(PLAIN_ALL_REDUCE_ENV) == "1"
    if on:
        log.warning("%s=1: row-parallel layers all-reduce rounded partials (benchmark mode; NOT bitwise equal "
                    "to training)", PLAIN_ALL_REDUCE_ENV)
    return on


def head_graphs_for(vllm_config, tp: int) -> HeadGraphs | None:
    """The engine's head graphs: TP=1 with CUDA graphs on (``enforce_eager`` / ``cudagraph_mode=NONE``: none),
    for steps of up to ``HEAD_GRAPH_ROWS`` sequences, or the engine's ``max_num_seqs`` where fewer (a step's head
    has a row a sequence)."""
    from vllm.config import CUDAGraphMode

    cc = vllm_config.compilation_config
    eager = vllm_config.model_config.enforce_eager or cc.cudagraph_mode == CUDAGraphMode.NONE
    seqs = getattr(vllm_config.scheduler_config, "max_num_seqs", None) or HEAD_GRAPH_ROWS
    return None if tp != 1 or eager else HeadGraphs(min(HEAD_GRAPH_ROWS, seqs))


LOGPROBS_FLAG = ('logprobs_mode="raw_logits" (Python: LLM(..., logprobs_mode="raw_logits"); '
                 'server: --logprobs-mode raw_logits)')


class RLKLinearMethod(UnquantizedLinearMethod):
    """vLLM's unquantized weights and loaders; the GEMM is the op backend's linear."""

    def __init__(self, backend: str):
        self.backend = backend  # UnquantizedLinearMethod.__init__ only picks a GEMM: not needed

    def process_weights_after_loading(self, layer):
        pass  # the stock CPU path prepacks and deletes layer.weight

    def apply(self, layer, x, bias=None):
        return get_backend(self.backend).linear(x, layer.weight, bias)


class RLKRowParallelMethod(RLKLinearMethod):
    """Row-parallel GEMM with the canonical K tree: each rank reduces its 8/k K-groups to fp32
    partials; at TP=2 the two ranks' partials are all-reduced (the canonical sum there is the one
    addition p0 + p1), at TP=4/8 all-gathered and combined in rank order; then the (unsharded) bias
    is added and the result rounded -- the same bits at every TP degree."""

    def __init__(self, backend: str):
        super().__init__(backend)
        self.plain_all_reduce = _plain_all_reduce()

    def apply(self, layer, x, bias=None):
        ops = get_backend(self.backend)
        if layer.tp_size == 1:  # the whole tree in one call: the training class's linear, any K
            if hasattr(ops, "linear_unfolded") and not observed(layer):
                # a split-K launch's partials, folded by the next residual add + RMSNorm (the decoder's): the same
                # bits, a fold launch fewer (hooks on the layer see its output as usual)
                return ops.linear_unfolded(x, layer.weight, layer.bias)
            return ops.linear(x, layer.weight, layer.bias, row_parallel=True)
        if self.plain_all_reduce:
            out = tensor_model_parallel_all_reduce(ops.linear(x, layer.weight, None))
            return out if layer.bias is None else out + layer.bias
        part = ops.shard_partial(x, layer.weight, layer.tp_size)
        if layer.tp_size == 2:
            # the canonical sum is p0 + p1, one fp32 addition: commutative, so any all-reduce of the
            # two partials gives it bit for bit, moving one fp32 tensor instead of gathering both
            return ops.combine_partials(tensor_model_parallel_all_reduce(part)[None], layer.bias, x.dtype)
        return ops.combine_partials(tensor_model_parallel_all_gather(part[None], dim=0), layer.bias, x.dtype)


class RLKEmbeddingMethod(UnquantizedEmbeddingMethod):
    def process_weights_after_loading(self, layer):
        pass  # no CPU prepack: the weight is only gathered (embedding) or read by the head


class _PagedAttention(Attention):
    """vLLM's Attention layer (owns this layer's paged KV cache) with the decoder's calling
    convention: per-head tensors in, per-head tensors out."""

    def forward(self, q_TNH, k_TKH, v_TKH, meta: VllmContextMeta):
        t, _, d = q_TNH.shape
        out = super().forward(q_TNH.reshape(t, -1), k_TKH.reshape(t, -1), v_TKH.reshape(t, -1))
        return out.view(t, -1, d)


class VllmBuilder:
    """Makes the decoder's layers from vLLM's tensor-parallel layers (see module docstring).
    ``backend`` is what the linears call (``opaque:NAME`` when compiled); attention runs inside
    vLLM's own opaque attention op and calls ``attention_backend``."""

    def __init__(self, vllm_config, backend: str, attention_backend: str):
        self.cache_config = vllm_config.cache_config
        self.backend, self.attention_backend = backend, attention_backend
        self.tp_size = get_tensor_model_parallel_world_size()
        self.vocab_padding = padded_vocab(1)  # the canonical padding multiple

    def _ours(self, layer):
        layer.quant_method = RLKLinearMethod(self.backend)
        return layer

    def embedding(self, vocab_size, dim, prefix):
        # the canonical padded vocab, so that a tied lm_head shards along the head's vocab groups
        emb = VocabParallelEmbedding(vocab_size, dim, padding_size=self.vocab_padding, prefix=prefix)
        emb.quant_method = RLKEmbeddingMethod()
        return emb

    def qkv(self, hidden, head_dim, n_heads, n_kv_heads, bias, prefix):
        return self._ours(QKVParallelLinear(hidden, head_dim, n_heads, n_kv_heads, bias=bias,
                                            return_bias=False, prefix=prefix))

    def merged(self, in_features, out_sizes, bias, prefix):
        return self._ours(MergedColumnParallelLinear(in_features, out_sizes, bias=bias, return_bias=False,
                                                     prefix=prefix))

    def row(self, in_features, out_features, bias, prefix):
        # no all-reduce: RLKRowParallelMethod gathers and combines partials, then adds the bias
        layer = RowParallelLinear(in_features, out_features, bias=bias, skip_bias_add=bias, reduce_results=False,
                                  return_bias=False, prefix=prefix)
        layer.quant_method = RLKRowParallelMethod(self.backend)
        return layer

    def attention(self, layer_idx, n_heads, n_kv_heads, head_dim, scale, prefix):
        return _PagedAttention(n_heads, head_dim, scale, num_kv_heads=n_kv_heads, cache_config=self.cache_config,
                               prefix=prefix, attn_backend=RLKAttentionBackend, rlk_backend=self.attention_backend)


def compiles(vllm_config) -> bool:
    """Whether vLLM's compilation path (torch.compile, piecewise CUDA graphs) runs the decoder:
    opt-in with the config field ``rlk_compile: true`` (e.g. ``hf_overrides={"rlk_compile": True}``)
    while the default is measured on the GPU; vLLM's own switches (``enforce_eager``,
    ``compilation_config``) still turn it off."""
    return bool(getattr(vllm_config.model_config.hf_config, "rlk_compile", False))


@support_torch_compile(dynamic_arg_dims={"input_ids": 0, "positions": 0, "inputs_embeds": 0}, enable_if=compiles)
class VllmDecoder(Decoder):
    """The shared decoder with vLLM's forward signature, compiled by vLLM when ``compiles``. Its
    layers then call the op backend through ``rlk::*`` custom ops (``ops.library``), so the graph
    holds exactly the eager kernels and Inductor compiles only the glue between them."""

    def __init__(self, *, vllm_config, prefix: str = "model", config=None, build=None):
        super().__init__(config, build, prefix)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return super().forward(input_ids, positions, VllmContextMeta(), inputs_embeds)


class RLKVllmForCausalLM(nn.Module):
    """Family-independent vLLM class; ``rlk_models.<family>.vllm`` binds the architecture name."""

    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        validate_config(config)
        mode = vllm_config.model_config.logprobs_mode
        if mode != "raw_logits":
            raise ValueError(f"rlk models need {LOGPROBS_FLAG}, got logprobs_mode={mode!r}: any other mode "
                             "post-processes the log-prob head's values and breaks bitwise parity with training")
        tp = get_tensor_model_parallel_world_size()
        if tp not in (1, 2, 4, 8) or get_pp_group().world_size != 1:
            raise NotImplementedError(f"rlk vLLM classes run with tensor_parallel_size in (1, 2, 4, 8) (the canonical "
                                      f"reduction has 8 segments) and pipeline_parallel_size=1; got tp={tp}")
        check_fingerprint(config, vllm_config.model_config.dtype, "the vLLM class", required=True)
        maybe_require(config)
        self.config = config
        backend = config.rlk_backend
        if backend == "triton" and torch.cuda.is_available():  # the GPU model's recorded kernel variants, compiled
            # on a thread pool now rather than one by one in the profile run and the graph capture (precompile.py)
            from ..ops.triton.precompile import preload_device_kernels

            preload_device_kernels()
        if compiles(vllm_config):  # the decoder's layers call the ops as opaque custom ops
            config = copy.copy(config)
            config.rlk_backend = OPAQUE + backend
        build = VllmBuilder(vllm_config, config.rlk_backend, backend)
        self.model = VllmDecoder(vllm_config=vllm_config, prefix="model", config=config, build=build)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, padding_size=build.vocab_padding,
                                      prefix="lm_head")
        self.lm_head.quant_method = RLKEmbeddingMethod()
        if config.tie_word_embeddings:
            self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
        self.head_graphs = head_graphs_for(vllm_config, tp)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        with trusted_values():
            return self.model.embed_tokens(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        # vLLM built and validated the ids and positions: no per-layer host reads of their values, which
        # would sync an eager step's host with the GPU at every layer (ops.checks.trusted_values)
        with trusted_values():
            return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """fp32 log-probs [n, vocab] from the log-prob head (reported as-is under raw_logits).
        Under TP each rank reduces its vocab groups; the stats are gathered and combined in the
        canonical order, then each rank's slice of log-probs is gathered."""
        ops, vocab, head = get_backend(self.config.rlk_backend), self.config.vocab_size, self.lm_head
        tp = get_tensor_model_parallel_world_size()  # the head's group (ParallelLMHead's own
        if tp == 1:                                  # rank attribute moved between vLLM versions)
            if self.head_graphs is not None:
                return self.head_graphs(lambda h, out: ops.full_logprobs(h, head.weight, vocab, out=out),
                                        hidden_states, head.weight, vocab)
            return ops.full_logprobs(hidden_states, head.weight, vocab)
        shard = vocab_shard(vocab, get_tensor_model_parallel_rank(), tp)
        st = ops.shard_stats(hidden_states, head.weight, shard, vocab, None, with_entropy=False, keep_logits=True)
        # the three stats in one all-gather ([tp, 3, T]: a copy, so the same values as three)
        m, s, e = tensor_model_parallel_all_gather(torch.stack((st.m, st.s, st.e))[None], dim=0).unbind(1)
        lse, _, _ = ops.combine_shards(m, s, e, torch.zeros_like(m))
        local = hidden_states.new_full((hidden_states.shape[0], shard[1] - shard[0]), float("-inf"),
                                       dtype=torch.float32)
        local[:, :st.logits.shape[1]] = st.logits - lse[:, None]
        return tensor_model_parallel_all_gather(local, dim=-1)[:, :vocab]

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load rlk-named tensors (``rlk-convert`` output, or a training model's parameters); the
        set must be complete (vLLM does not check it for modules with custom linear/embedding
        methods, and a missing tensor would leave uninitialised memory in the engine)."""
        params = dict(self.named_parameters(remove_duplicate=False))
        loaded = set()
        # at TP=1 every loader of a tensor of the parameter's own shape, device and dtype is a whole copy (a fused
        # qkv / gate_up tensor's shards land on the rows they came from): those copies go as one multi-tensor copy
        # at the end -- a trainer's in-process push is hundreds of tensors of one device (226 at 0.6B), whose
        # loaders and launches took a third of a push (11 of ~32 ms on an H100). A checkpoint's tensors (host
        # memory), the padded embedding / head (another shape) and vLLM's layerwise reload (its parameters on the
        # meta device) take the loaders.
        direct = get_tensor_model_parallel_world_size() == 1
        dsts, srcs = [], []
        for name, tensor in weights:
            if name.endswith(IGNORED_SUFFIXES):
                continue
            if self.config.tie_word_embeddings and name == "lm_head.weight":
                continue
            if name not in params:
                raise KeyError(f"unexpected tensor {name!r} for {type(self).__name__}; {FUSION_HINT}")
            param = params[name]
            if (direct and tensor.shape == param.shape and tensor.device == param.device
                    and tensor.dtype == param.dtype):
                dsts.append(param.data)
                srcs.append(tensor)
            else:
                getattr(param, "weight_loader", default_weight_loader)(param, tensor)
            loaded.add(name)
        if dsts:
            torch._foreach_copy_(dsts, srcs)
        if self.config.tie_word_embeddings:
            loaded.add("lm_head.weight")
        # built here, on the weights' device, before vLLM's first (possibly compiled) forward: a table
        # built while Dynamo traces would become graph code that Inductor could compute differently
        self.model.rope_table(self.lm_head.weight.device)
        missing = sorted(set(params) - loaded)
        if missing:
            raise ValueError(f"{type(self).__name__}: the checkpoint lacks {len(missing)} tensor(s): "
                             f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
        return loaded
