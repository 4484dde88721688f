"""What every rlk config adds to transformers' Qwen3Config / LlamaConfig, and what it refuses.

An rlk config is the stock config plus ``rlk_backend`` (which op backend runs the numerics).
``validate_config`` names every field the rlk decoder cannot honour; it runs when a model is
built and when a checkpoint is converted, so an unsupported checkpoint fails before anything
is loaded or written.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ops import available_backends
from ..ops.rope_table import UnsupportedRope, rope_inv_freq


class UnsupportedConfig(ValueError):
    pass


@dataclass
class RLKConfigFields:
    """The fields every rlk config adds (mixed into the family's config dataclass)."""
    rlk_backend: str = "reference"           # op backend computing every number (rlk_models.ops)
    rlk_fingerprint: dict | None = None      # numerics the checkpoint was converted for (rlk_models.ops.fingerprint)
    rlk_check_fingerprint: bool = True       # refuse to load with different numerics
    rlk_strict: bool = False                 # run the cached self-test at load, refuse on failure
    # training: rebuild the MLP activation and the norm outputs in the backward instead of keeping them
    # (the same kernels, so the same bits; about a quarter less activation memory, ~2% more time)
    rlk_rebuild_activations: bool = True
    # training: the log-prob head keeps its probabilities (T x vocab in the model's dtype) from the
    # forward for the backward instead of recomputing the logits there (backends that can: triton;
    # one [T, V, D] matmul less a step, 2 bytes x T x vocab held in bf16)
    rlk_head_save_probs: bool = True


def rope_parameters(config) -> dict:
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_type" not in params and "rope_theta" not in params:
        raise UnsupportedConfig("per-layer-type rope_parameters are not supported")
    return dict(params or {"rope_type": "default", "rope_theta": getattr(config, "rope_theta", 10000.0)})


def validate_config(config) -> None:
    """Raise ``UnsupportedConfig`` naming the first config field the rlk decoder cannot run."""
    def bad(field, value, why):
        raise UnsupportedConfig(f"unsupported config field {field}={value!r}: {why}")

    if getattr(config, "hidden_act", "silu") != "silu":
        bad("hidden_act", config.hidden_act, "only 'silu' is implemented")
    if getattr(config, "use_sliding_window", False):
        bad("use_sliding_window", True, "sliding-window attention is not implemented")
    layer_types = getattr(config, "layer_types", None) or []
    if any(t != "full_attention" for t in layer_types):
        bad("layer_types", sorted(set(layer_types)), "only 'full_attention' layers are implemented")
    for moe in ("num_experts", "num_local_experts", "n_routed_experts"):
        if getattr(config, moe, None):
            bad(moe, getattr(config, moe), "mixture-of-experts models are not supported")
    if (getattr(config, "pretraining_tp", 1) or 1) != 1:
        bad("pretraining_tp", config.pretraining_tp, "only 1 is supported")
    if config.num_attention_heads % config.num_key_value_heads:
        bad("num_key_value_heads", config.num_key_value_heads,
            f"must divide num_attention_heads={config.num_attention_heads}")
    if getattr(config, "head_dim", None) in (None, 0):
        bad("head_dim", getattr(config, "head_dim", None), "must be set explicitly")
    backend = getattr(config, "rlk_backend", "reference")
    if backend not in available_backends():
        bad("rlk_backend", backend, f"known backends: {available_backends()}")
    try:
        rope_inv_freq(config.head_dim, rope_parameters(config))
    except (UnsupportedRope, KeyError) as e:
        bad("rope_parameters", getattr(config, "rope_parameters", None), str(e))
