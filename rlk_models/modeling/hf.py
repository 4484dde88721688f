"""HF-style training class over the shared packed decoder.

``RLKForCausalLM`` is a transformers ``PreTrainedModel``: ``from_pretrained`` /
``save_pretrained``, ``AutoModelForCausalLM``, ``forward(input_ids, attention_mask, labels)``
returning logits and loss, gradient checkpointing, bf16 / fp32. Batches are packed before the
decoder (the tokens where ``attention_mask`` is 1, in order, form each row's sequence, with
positions 0, 1, ...), so padding never reaches the numerics and a sequence's bits do not
depend on its batch. RL code should call ``token_logprobs`` (padded batches) or
``packed_token_logprobs`` (flat tokens + boundaries): both go through the log-prob head and
give the same bits for the same sequence, equal to the vLLM class's log-probs.

``generate()`` (transformers' GenerationMixin: greedy and sampling, left- or right-padded
batches, ``output_logits``/``output_scores``) decodes through a paged KV cache built from the
same ops (``modeling.generation``); while it does, ``logits`` are the log-prob head's log-probs,
so a generated token's raw logit is its ``token_logprobs`` value, bit for bit. Rollouts at scale
belong in vLLM (the vLLM class); ``generate()`` is for evaluation and small runs.

torch.compile: ``forward``, ``token_logprobs``, ``packed_token_logprobs`` and
``packed_hidden_states`` run eagerly inside a compiled caller (``torch.compiler.disable``; e.g.
``torch.compile(model)`` or a trainer's ``torch_compile=True``): Inductor would otherwise fuse and
reorder the ops' reductions -- on the tiny Qwen3 the loss, a gradient and the token log-probs all
changed bits -- and the trainer would drift from the rollout. (The vLLM class compiles through
``rlk::*`` custom ops instead, ``ops.library``.)

Differences from transformers' Qwen3/Llama: ``logits`` are float32 (the head's precision);
``q/k/v`` and ``gate/up`` are fused (``qkv_proj``, ``gate_up_proj``: see
``rlk_models.conversion``); no beam search or assisted decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.utils import ModelOutput

from ..ops import get_backend
from ..ops.checks import packed_lengths, trusted_values
from ..ops.fingerprint import check_fingerprint
from ..ops.selftest import maybe_require
from .config import validate_config
from .decoder import Decoder, Embedding, Linear, RMSNorm, TrainingBuilder, VarlenMeta
from .generation import RLKCache, cached_step
from .logprob_graphs import LogprobGraphs


@dataclass
class TokenLogprobsOutput(ModelOutput):
    """``forward(..., labels, fused_lm_head=True)``: per-token results of the log-prob head, laid out
    like the labels shifted by one ([B, S-1]; entry [b, t] is about ``labels[b, t+1]``)."""

    loss: torch.Tensor | None = None
    log_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    label_mask: torch.Tensor | None = None


@dataclass
class Packed:
    """Tokens of a [B, S] batch packed by ``attention_mask``."""
    input_ids: torch.Tensor | None   # [T]
    positions: torch.Tensor          # [T]
    cu_seqlens: torch.Tensor         # [B + 1]
    flat_index: torch.Tensor         # [T]: position of each packed token in the flattened [B*S]
    shape: tuple[int, int]


def pack(input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
         shape: tuple[int, int] | None = None) -> Packed:
    b, s = shape or tuple(input_ids.shape)
    device = (input_ids if input_ids is not None else attention_mask).device
    if attention_mask is None:
        mask = torch.ones(b, s, dtype=torch.bool, device=device)
    else:
        if attention_mask.shape != (b, s):
            raise ValueError(f"attention_mask {tuple(attention_mask.shape)} must match input_ids ({b}, {s})")
        mask = attention_mask.bool()
    lengths = mask.sum(dim=1)
    cu = torch.zeros(b + 1, dtype=torch.int64, device=device)
    cu[1:] = torch.cumsum(lengths, 0)
    flat_index = torch.nonzero(mask.reshape(-1), as_tuple=False)[:, 0]  # the one host read (the token count)
    positions = (torch.cumsum(mask, dim=1) - 1).reshape(-1)[flat_index]
    ids = input_ids.reshape(-1)[flat_index] if input_ids is not None else None
    return Packed(ids, positions, cu, flat_index, (b, s))


def packed_positions(cu_seqlens: torch.Tensor, total: int | None = None) -> torch.Tensor:
    """Positions 0..len-1 within each sequence of a packed batch; ``total``: its token count, where the caller
    knows it (no host read of ``cu_seqlens[-1]``)."""
    cu = cu_seqlens.long()
    t = int(cu[-1]) if total is None else total
    starts = torch.repeat_interleave(cu[:-1], cu[1:] - cu[:-1], output_size=t)
    return torch.arange(t, device=cu.device) - starts


def next_token_targets(input_ids: torch.Tensor, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(target [T], valid [T]): each token's successor in its own sequence; the last token of a
    sequence has none (valid False, target 0)."""
    t = input_ids.shape[0]
    nxt = torch.cat([input_ids[1:], input_ids.new_zeros(1)])
    last = torch.zeros(t + 1, dtype=torch.bool, device=input_ids.device)
    last.index_fill_(0, cu_seqlens[1:].long(), True)  # not last[idx] = True: its scalar is copied to the GPU, a wait
    valid = ~last[1:t + 1]
    return torch.where(valid, nxt, torch.zeros_like(nxt)), valid


class LMHead(nn.Module):
    """The lm_head weight [V, D]; the math lives in the backend's log-prob head."""

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))


class RLKPreTrainedModel(PreTrainedModel):
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["DecoderLayer"]
    _supports_sdpa = False
    _supports_flash_attn = False

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, (Linear, Embedding, LMHead)):
            init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, RMSNorm):
            init.ones_(module.weight)


class RLKForCausalLM(RLKPreTrainedModel, GenerationMixin):
    """Family-independent training class; ``rlk_models.qwen3`` / ``.llama`` only bind the config."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        validate_config(config)
        # parameters are created in the default dtype, which from_pretrained(dtype=...) sets; a
        # dtype other than the checkpoint's warns (fp32 master weights), anything else refuses
        check_fingerprint(config, torch.get_default_dtype(), "the training class", dtype_strict=False)
        maybe_require(config)
        super().__init__(config)
        self.model = Decoder(config, TrainingBuilder(config.rlk_backend))
        self.lm_head = LMHead(config.vocab_size, config.hidden_size)
        self.post_init()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers' ``from_pretrained``, failing closed: a checkpoint whose tensor set differs
        from the model's (missing, unexpected or mis-shaped tensors; transformers would fill the
        missing ones with random init and only print a table) or that has no ``rlk_fingerprint``
        is refused with an error naming what is wrong."""
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        from ..conversion.maps import FUSION_HINT, UNFUSED_SUFFIXES  # conversion imports the families

        problems, unfused = [], False
        for key, what in (("missing_keys", "missing"), ("unexpected_keys", "unexpected"),
                          ("mismatched_keys", "of the wrong shape")):
            names = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get(key) or [])
            unfused |= any(n.endswith(UNFUSED_SUFFIXES) for n in names)
            if names:
                more = " ..." if len(names) > 8 else ""
                problems.append(f"{len(names)} {what} tensor(s): {', '.join(names[:8])}{more}")
        if problems:
            hint = f" ({FUSION_HINT})" if unfused else ""
            raise ValueError(f"{cls.__name__}.from_pretrained({args[0] if args else ''}): the checkpoint does not "
                             f"match the model: {'; '.join(problems)}{hint}")
        check_fingerprint(model.config, None, "the training class", required=True)  # __init__ compared the rest
        return (model, info) if want_info else model

    @property
    def ops(self):
        return get_backend(self.config.rlk_backend)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    # --- packed core -----------------------------------------------------------------------

    @torch.compiler.disable  # eager bits inside compiled callers (module docstring)
    def packed_hidden_states(self, input_ids: torch.Tensor | None, cu_seqlens: torch.Tensor,
                             positions: torch.Tensor | None = None,
                             inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        """Final-norm hidden states [T, D] of packed sequences (flat ``input_ids [T]``)."""
        cu_seqlens = cu_seqlens.to(torch.int64)
        if positions is None:
            positions = packed_positions(cu_seqlens)
        return self.model(input_ids, positions, VarlenMeta(cu_seqlens), inputs_embeds)

    def _head(self, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool):
        return self.ops.logprob_head(hidden, self.lm_head.weight, targets, self.config.vocab_size, with_entropy,
                                     getattr(self.config, "rlk_head_save_probs", True))

    def _head_at(self, hidden: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor, with_entropy: bool):
        """``_head`` over ``rows`` of ``hidden`` only (a bool mask, or distinct indices): (log-probs, entropy or
        None) of every row, 0 at the others. Each computed row has its bits: the head is batch-invariant."""
        logp, ent = self._head(hidden[rows], targets[rows], with_entropy)
        zeros = logp.new_zeros(hidden.shape[0])
        return zeros.index_put((rows,), logp), (zeros.index_put((rows,), ent) if ent is not None else None)

    @property
    def logprob_graphs(self) -> LogprobGraphs:
        """The CUDA graphs that ``cuda_graphs=True`` replays (``modeling.logprob_graphs``); ``.clear()``
        frees them."""
        graphs = self.__dict__.get("_logprob_graphs")
        if graphs is None:
            graphs = self._logprob_graphs = LogprobGraphs()
        return graphs

    _cuda_graphs_default = False

    def cuda_graphs_enable(self) -> None:
        """Makes ``cuda_graphs=True`` the default of the log-prob passes: ``packed_token_logprobs``,
        ``token_logprobs`` and ``forward(..., labels, fused_lm_head=True)`` (TRL's protocol: what a trainer
        that calls ``forward`` itself runs). The model's other passes (logits, the loss, ``generate``) are
        unchanged. Not saved with the model; a copy (``copy.deepcopy``) keeps the setting."""
        self._cuda_graphs_default = True

    def cuda_graphs_disable(self) -> None:
        """Back to eager log-prob passes by default; the captured graphs and their memory are dropped."""
        self._cuda_graphs_default = False
        self.logprob_graphs.clear()

    def _graphs_on(self, cuda_graphs: bool | None) -> bool:
        return self._cuda_graphs_default if cuda_graphs is None else bool(cuda_graphs)

    @torch.compiler.disable  # eager bits inside compiled callers (module docstring)
    def packed_token_logprobs(self, input_ids: torch.Tensor, cu_seqlens: torch.Tensor,
                              return_entropy: bool = False, cuda_graphs: bool | None = None,
                              score_mask: torch.Tensor | None = None):
        """float32 [T]: entry i is log p(input_ids[i+1] | its sequence up to i) for packed
        sequences ``input_ids [T]`` split at ``cu_seqlens [B+1]``; the last token of each
        sequence has no successor and gets 0. With ``return_entropy`` also the entropy [T].

        ``score_mask`` (bool [T]): the tokens whose entries are wanted (an RL step's completion
        tokens); the head runs over those rows only, the others get 0 (entropy too). Each wanted
        entry has the bits it has without the mask: the head computes a row from that row alone.

        ``cuda_graphs=True`` (CUDA): the same bits by a CUDA graph replay of the whole pass,
        captured once per padded batch size (``modeling.logprob_graphs``) -- one launch where the
        eager pass queues a few hundred, whose host time bounds small micro-batches. With no
        gradient (an RL step's old-policy and reference passes) one forward graph; with gradients
        (the policy's pass) a forward graph whose backward is a graph too, the parameters'
        gradients accumulating into ``.grad`` (the entropy is not differentiated there; backpropagate
        each output before the next forward of its padded size). None: the model's default
        (``cuda_graphs_enable``; off unless set)."""
        if input_ids.dim() != 1:
            raise ValueError(f"packed_token_logprobs: input_ids must be flat [T], got {tuple(input_ids.shape)}")
        if score_mask is not None and (score_mask.shape != input_ids.shape or score_mask.dtype != torch.bool):
            raise ValueError(f"score_mask must be a bool tensor of input_ids' shape {tuple(input_ids.shape)}, got "
                             f"{score_mask.dtype} {tuple(score_mask.shape)}")
        if self._graphs_on(cuda_graphs):
            logp, ent = self.logprob_graphs(self, input_ids, cu_seqlens, return_entropy, score_mask)
            return (logp, ent) if return_entropy else logp
        cu = cu_seqlens.to(device=input_ids.device, dtype=torch.int64)
        packed_lengths(cu, input_ids.numel())
        hidden = self.packed_hidden_states(input_ids, cu)
        targets, valid = next_token_targets(input_ids, cu)
        if score_mask is None:
            logp, ent = self._head(hidden, targets, return_entropy)
        else:
            score_mask = score_mask.to(input_ids.device)
            logp, ent = self._head_at(hidden, targets, score_mask, return_entropy)
            valid = valid & score_mask
        logp = torch.where(valid, logp, torch.zeros_like(logp))
        if return_entropy:
            return logp, ent
        return logp

    @torch.compiler.disable  # eager bits inside compiled callers (module docstring)
    def token_logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                       return_entropy: bool = False, cuda_graphs: bool | None = None,
                       score_mask: torch.Tensor | None = None):
        """float32 [B, S-1]: entry [b, t] = log p(input_ids[b, t+1] | input_ids[b, :t+1]) for
        right-padded batches (entries at padding are 0). Same bits as ``packed_token_logprobs``
        and as the vLLM class for the same sequence, whatever else is in the batch.
        ``cuda_graphs``: as ``packed_token_logprobs``'s (CUDA). ``score_mask`` (bool [B, S-1],
        the output's shape: e.g. the completion tokens' positions): only those entries are
        computed (the head skips the other rows), the rest are 0; see ``packed_token_logprobs``."""
        p = pack(input_ids, attention_mask)
        score = None
        if score_mask is not None:
            b, s = p.shape
            if score_mask.shape != (b, s - 1) or score_mask.dtype != torch.bool:
                raise ValueError(f"score_mask must be a bool tensor of the output's shape ({b}, {s - 1}), got "
                                 f"{score_mask.dtype} {tuple(score_mask.shape)}")
            full = torch.zeros(b, s, dtype=torch.bool, device=input_ids.device)
            full[:, :-1] = score_mask
            score = full.reshape(-1)[p.flat_index]
        out = self.packed_token_logprobs(p.input_ids, p.cu_seqlens, return_entropy, cuda_graphs, score)
        b, s = p.shape

        def unpack(x):
            full = x.new_zeros(b * s)
            full[p.flat_index] = x
            return full.view(b, s)[:, :-1]

        if return_entropy:
            return unpack(out[0]), unpack(out[1])
        return unpack(out)

    # --- HF API ------------------------------------------------------------------------------

    @torch.compiler.disable  # eager bits inside compiled callers (module docstring)
    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values=None,
                inputs_embeds: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                use_cache: bool | None = None, logits_to_keep: int | torch.Tensor = 0,
                num_items_in_batch: int | torch.Tensor | None = None, fused_lm_head: bool = False,
                **kwargs) -> CausalLMOutputWithPast | TokenLogprobsOutput:
        """transformers-style forward. ``labels`` [B, S] with -100 for ignored positions give the
        mean next-token cross-entropy (or the sum over ``num_items_in_batch``), computed through
        the log-prob head. ``position_ids`` with one row and no ``attention_mask`` mark packed
        sequences (a new sequence starts wherever the position is 0), as in padding-free training.
        With ``past_key_values`` (what ``generate`` passes) the step runs through the KV cache and
        ``logits`` are log-probs (``modeling.generation``). With ``fused_lm_head=True`` (TRL's
        protocol for trainers that only need the labels' log-probs) no logits are formed: the
        output has ``log_probs`` and ``entropy`` [B, S-1] of each next label from the log-prob head
        (0 where the label is -100), ``label_mask`` and ``loss`` -- the bits ``token_logprobs`` and
        the vLLM class give for the same tokens. After ``cuda_graphs_enable()`` (CUDA) that pass runs by
        graph replays (``packed_token_logprobs(..., cuda_graphs=True)``: the same bits, the gradients the
        padded batch's; the head over the labelled rows, as eagerly); its labels must then be the input ids or -100.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        if past_key_values is not None:
            return self._cached_forward(input_ids, attention_mask, inputs_embeds, past_key_values, labels,
                                        logits_to_keep)
        if fused_lm_head and labels is None:
            raise ValueError("fused_lm_head=True needs labels (-100 where no log-prob is wanted)")
        shape = tuple((input_ids if input_ids is not None else inputs_embeds).shape[:2])
        p = self._pack_inputs(input_ids, attention_mask, position_ids, shape)
        if fused_lm_head and self._graphs_on(None):
            return self._fused_output_graphed(p, labels, num_items_in_batch)
        embeds = inputs_embeds.reshape(-1, inputs_embeds.shape[-1])[p.flat_index] if inputs_embeds is not None else None
        hidden = self.packed_hidden_states(p.input_ids, p.cu_seqlens, p.positions, embeds)
        if fused_lm_head:
            return self._fused_output(hidden, p, labels, num_items_in_batch)
        logits = self._kept_logits(hidden, p, logits_to_keep)
        loss = None if labels is None else self._loss(hidden, p, labels, num_items_in_batch)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def _cached_forward(self, input_ids, attention_mask, inputs_embeds, cache, labels, logits_to_keep):
        if labels is not None:
            raise ValueError("labels with past_key_values: the loss is computed without a KV cache")
        if not isinstance(cache, RLKCache):
            if not isinstance(cache, Cache) or cache.get_seq_length() != 0:
                raise ValueError(f"past_key_values must be an RLKCache (what generate() builds here), got "
                                 f"{type(cache).__name__}")
            ref = input_ids if input_ids is not None else inputs_embeds
            p = next(self.parameters())
            cache = RLKCache(self.config, ref.shape[0], p.device, p.dtype)  # replaces generate's empty cache
        logits = cached_step(self, input_ids, attention_mask, inputs_embeds, cache, logits_to_keep)
        return CausalLMOutputWithPast(logits=logits, past_key_values=cache)

    def generate(self, *args, **kwargs):
        """transformers' ``generate`` through the rlk KV cache (module docstring): greedy or
        sampling, any processors; refuses what the cache cannot do (beam search, assisted
        decoding, ``use_cache=False``)."""
        gc = kwargs.get("generation_config") or self.generation_config
        if (kwargs.get("num_beams") or gc.num_beams or 1) > 1:
            raise ValueError("rlk generate() supports greedy and sampling, not beam search (num_beams > 1)")
        if kwargs.get("assistant_model") is not None or kwargs.get("prompt_lookup_num_tokens") is not None:
            raise ValueError("rlk generate() does not support assisted decoding")
        if kwargs.get("use_cache", gc.use_cache) is False:  # None: the default, on
            raise ValueError("rlk generate() always decodes through its KV cache (use_cache=False is not supported)")
        return super().generate(*args, **kwargs)

    @staticmethod
    def _pack_inputs(input_ids, attention_mask, position_ids, shape: tuple[int, int]) -> Packed:
        """Pack by ``attention_mask``; or, for padding-free batches (``position_ids`` of one row
        and no mask), start a new sequence wherever the position is 0."""
        if position_ids is None or attention_mask is not None:
            return pack(input_ids, attention_mask, shape)
        if shape[0] != 1:
            raise ValueError("position_ids without attention_mask is the packed format: batch size must be 1")
        pos = position_ids.reshape(-1).to(torch.int64)
        starts = torch.nonzero(pos == 0)[:, 0]
        if starts.numel() == 0 or int(starts[0]) != 0:
            raise ValueError("packed position_ids must start every sequence at 0")
        cu = torch.cat([starts, torch.tensor([pos.numel()], device=pos.device)])
        return Packed(input_ids.reshape(-1) if input_ids is not None else None, pos, cu,
                      torch.arange(pos.numel(), device=pos.device), shape)

    def _kept_logits(self, hidden: torch.Tensor, p: Packed, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
        """fp32 logits [B, S or kept, V] at the positions ``logits_to_keep`` selects (0 = all)."""
        b, s = p.shape
        keep = torch.zeros(b, s, dtype=torch.bool, device=hidden.device)
        if isinstance(logits_to_keep, int):
            keep[:, -logits_to_keep if logits_to_keep else 0:] = True
        else:
            keep[:, logits_to_keep] = True
        rows = keep.reshape(-1)[p.flat_index]
        logits_flat = self.ops.linear(hidden[rows], self.lm_head.weight, out_dtype=torch.float32)
        logits = hidden.new_zeros(b * s, self.config.vocab_size, dtype=torch.float32)
        logits[p.flat_index[rows]] = logits_flat
        return logits.view(b, s, -1)[:, keep.any(0)] if not bool(keep.all()) else logits.view(b, s, -1)

    def _shifted_labels(self, p: Packed, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(next label [T], valid [T], range [2]): each packed token's next label (``labels[b, t+1]``, HF's shift),
        whether it is not -100, and the labelled ones' (min, max) on the device ([V, -1] where none is labelled),
        for ``_check_label_range`` after a host read."""
        b, s = p.shape
        if labels.shape != (b, s):
            raise ValueError(f"labels {tuple(labels.shape)} must match input_ids ({b}, {s})")
        shifted = torch.cat([labels[:, 1:], labels.new_full((b, 1), -100)], dim=1).reshape(-1)[p.flat_index]
        valid = shifted != -100
        v = self.config.vocab_size
        if not shifted.numel():
            return shifted, valid, shifted.new_tensor([v, -1])
        span = torch.stack([torch.where(valid, shifted, v).min(), torch.where(valid, shifted, -1).max()])
        return shifted, valid, span

    def _check_label_range(self, lo: int, hi: int) -> None:
        if lo < 0 or hi >= self.config.vocab_size:
            raise IndexError(f"labels must be -100 or lie in [0, {self.config.vocab_size}), got range [{lo}, {hi}] "
                             f"(the -100s aside)")

    def _label_logprobs(self, hidden: torch.Tensor, p: Packed, labels: torch.Tensor, with_entropy: bool):
        """(log p, entropy or None, labelled [N], valid [T]): the head at each packed token whose next label
        (``labels[b, t+1]``, HF's shift) is not -100 (``labelled``: their indices, in order)."""
        shifted, valid, span = self._shifted_labels(p, labels)
        self._check_label_range(*span.tolist())  # one host read ([V, -1]: none labelled); hidden[labelled] reads anyway
        labelled = valid.nonzero()[:, 0]
        with trusted_values():  # checked just now: the head's own read of the same targets would add a wait
            logp, ent = self._head(hidden[labelled], shifted[labelled], with_entropy)
        return logp, ent, labelled, valid

    def _loss_of(self, logp: torch.Tensor, valid: torch.Tensor, num_items_in_batch) -> torch.Tensor:
        """Mean negative log-likelihood: the sum (in the backend's fixed order) over the labelled
        tokens' count, or over ``num_items_in_batch``."""
        total = -self.ops.token_sum(logp)
        denom = num_items_in_batch if num_items_in_batch is not None else valid.sum()
        return total / torch.as_tensor(denom, dtype=torch.float32, device=total.device).clamp_min(1)

    def _loss(self, hidden: torch.Tensor, p: Packed, labels: torch.Tensor, num_items_in_batch) -> torch.Tensor:
        logp, _, _, valid = self._label_logprobs(hidden, p, labels, False)
        return self._loss_of(logp, valid, num_items_in_batch)

    def _fused_output(self, hidden: torch.Tensor, p: Packed, labels: torch.Tensor,
                      num_items_in_batch) -> TokenLogprobsOutput:
        return self._fused_result(*self._label_logprobs(hidden, p, labels, True), p, num_items_in_batch)

    def _fused_output_graphed(self, p: Packed, labels: torch.Tensor, num_items_in_batch) -> TokenLogprobsOutput:
        """``_fused_output`` by the graphed pass over every packed token's successor, kept where the next label is
        not -100: the same bits where each such label is the token that follows in its sequence, at the position
        that follows (refused otherwise). The labels' checks and their count ride along the graphs' one host read
        before the replay, and the labelled entries are gathered by that count: no other wait on the GPU."""
        if p.input_ids is None:
            raise ValueError("cuda_graphs_enable(): the graphed pass reads input_ids, not inputs_embeds (call "
                             "cuda_graphs_disable() to pass embeddings)")
        shifted, valid, span = self._shifted_labels(p, labels)
        targets, has_next = next_token_targets(p.input_ids, p.cu_seqlens)  # the graph's: the next ids, positions
        other = (valid & (~has_next | (shifted != targets))).any()
        moved = (p.positions != packed_positions(p.cu_seqlens, p.positions.numel())).any()
        count = []  # the labelled tokens' count, as the read gives it

        def check(lo, hi, other, moved, n):  # before the replay (and any capture)
            self._check_label_range(lo, hi)
            if other or moved:
                what = "labels other than the next input id (or -100)" if other else "positions that skip or repeat"
                raise ValueError(f"cuda_graphs_enable(): the graphed pass scores each token's successor at the next "
                                 f"position; this batch has {what}: call cuda_graphs_disable() for it")
            count.append(n)
        riders = torch.cat([span, torch.stack([other, moved, valid.sum()]).to(span)])
        logp, ent = self.logprob_graphs(self, p.input_ids, p.cu_seqlens, True, valid,  # the head's rows: labelled
                                        also=(riders, check))
        # the labelled tokens first, in order (a stable sort on the device), as many as the read counted
        labelled = torch.argsort((~valid).to(torch.uint8), stable=True)[:count[0]]
        return self._fused_result(logp[labelled], ent[labelled], labelled, valid, p, num_items_in_batch)

    def _fused_result(self, logp: torch.Tensor, ent: torch.Tensor, labelled: torch.Tensor, valid: torch.Tensor,
                      p: Packed, num_items_in_batch) -> TokenLogprobsOutput:
        b, s = p.shape
        where = p.flat_index[labelled]

        def grid(x):
            return x.new_zeros(b * s).index_put((where,), x).view(b, s)[:, :-1]

        mask = torch.zeros(b * s, dtype=torch.bool, device=valid.device)
        mask.index_fill_(0, where, True)
        return TokenLogprobsOutput(loss=self._loss_of(logp, valid, num_items_in_batch), log_probs=grid(logp),
                                   entropy=grid(ent), label_mask=mask.view(b, s)[:, :-1])
