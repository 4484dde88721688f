"""Llama (incl. Llama-3 RoPE scaling, attention/MLP bias flags)."""

from huggingface_hub.dataclasses import strict
from transformers import LlamaConfig

from ..modeling.config import RLKConfigFields
from ..modeling.hf import RLKForCausalLM


@strict
class RLKLlamaConfig(LlamaConfig, RLKConfigFields):
    model_type = "rlk_llama"
    rlk_qk_norm = False


class RLKLlamaForCausalLM(RLKForCausalLM):
    config_class = RLKLlamaConfig


__all__ = ["RLKLlamaConfig", "RLKLlamaForCausalLM"]
