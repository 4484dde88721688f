"""Llama (incl. Llama-3 RoPE scaling, attention/MLP bias flags)."""

from huggingface_hub.dataclasses import strict
from transformers import LlamaConfig

from ..modeling.config import RLKConfigFields
from ..modeling.family import Family
from ..modeling.hf import RLKForCausalLM
from ..qwen3 import FAMILY as _QWEN3


@strict
class RLKLlamaConfig(LlamaConfig, RLKConfigFields):
    model_type = "rlk_llama"
    rlk_qk_norm = False


class RLKLlamaForCausalLM(RLKForCausalLM):
    config_class = RLKLlamaConfig


FAMILY = Family(
    name="llama", hf_model_type="llama", hf_architecture="LlamaForCausalLM", config_cls=RLKLlamaConfig,
    training_cls=RLKLlamaForCausalLM,
    tiny=dict(_QWEN3.tiny, rope_parameters={  # the tiny Qwen3's sizes, with Llama-3 RoPE scaling
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}))

__all__ = ["FAMILY", "RLKLlamaConfig", "RLKLlamaForCausalLM"]
