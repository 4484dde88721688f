"""Qwen3: Llama plus per-head q/k RMSNorm before RoPE and an explicit head_dim."""

from huggingface_hub.dataclasses import strict
from transformers import Qwen3Config

from ..modeling.config import RLKConfigFields
from ..modeling.hf import RLKForCausalLM


@strict
class RLKQwen3Config(Qwen3Config, RLKConfigFields):
    model_type = "rlk_qwen3"
    rlk_qk_norm = True


class RLKQwen3ForCausalLM(RLKForCausalLM):
    config_class = RLKQwen3Config


__all__ = ["RLKQwen3Config", "RLKQwen3ForCausalLM"]
