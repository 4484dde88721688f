"""FSDP2 for the rlk training classes, with the mixed precision RL trainers use.

``fully_shard_model`` shards every decoder layer and then the root (embedding, final norm, the
log-prob head's weight) with ``torch.distributed.fsdp.fully_shard``. With
``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` over fp32 master weights
(``from_pretrained(dir, dtype=torch.float32)`` of a bf16 checkpoint), the forward runs on the
bf16 values of the masters -- for a checkpoint saved from bf16, the very weights the rollout
engine holds -- and every op is batch-invariant, so each rank's token log-probs are the bf16
rollout's bits whatever micro-batch it got. Gradients are reduce-scattered in fp32.

Gradients travel as a plain SUM (``set_force_sum_reduction_for_comms``), divided once afterwards
by ``gradient_divide_factor``; 1.0 (the default here) keeps the sum, so that N ranks each
taking one micro-batch then give the gradient one process gets by accumulating the same
micro-batches in order (for two ranks bit for bit: one fp32 addition either way); scale the loss
for a mean. ``rlk_models.testing.fsdp_check`` checks all three on CPU (gloo) and GPUs (NCCL).
"""

from __future__ import annotations

import torch
from torch import nn

FORWARD_METHODS = ("token_logprobs", "packed_token_logprobs")  # entry points; not the helpers they call


def fully_shard_model(model: nn.Module, mesh=None, param_dtype: torch.dtype = torch.bfloat16,
                      reduce_dtype: torch.dtype = torch.float32, gradient_divide_factor: float | None = 1.0,
                      reshard_after_forward: bool = True) -> nn.Module:
    """Apply FSDP2 to an rlk training model in place (decoder layers, then the root) and return it.
    ``token_logprobs``/``packed_token_logprobs`` gather the root's parameters like ``forward``."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

    from ..modeling.decoder import DecoderLayer
    from ..modeling.hf import RLKForCausalLM

    if not isinstance(model, RLKForCausalLM):
        raise TypeError(f"fully_shard_model: expected an rlk training model, got {type(model).__name__}")
    # cast_forward_inputs=False: a decoder layer's inputs include the fp32 RoPE table, which FSDP would
    # round to bf16 (changing every rotated q/k); activations are already in the compute dtype
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_forward_inputs=False)
    kw = dict(mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    for layer in model.model.layers:
        if not isinstance(layer, DecoderLayer):
            raise TypeError(f"fully_shard_model: unexpected layer {type(layer).__name__}")
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    for name in FORWARD_METHODS:  # entry points besides forward() that run the root's parameters
        register_fsdp_forward_method(model, name)
    # a plain SUM on the wire (no AVG/PREMUL_SUM: gloo has neither, and NCCL's premultiply rounds
    # before adding), then one division by the factor after it; each setting is per FSDP module
    for module in [*model.model.layers, model]:
        module.set_force_sum_reduction_for_comms(True)
        if gradient_divide_factor is not None:
            module.set_gradient_divide_factor(gradient_divide_factor)
    return model
