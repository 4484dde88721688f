"""Llama (incl. Llama-3 RoPE scaling, attention/MLP bias flags)."""

from huggingface_hub.dataclasses import strict
from transformers import LlamaConfig

from ..modeling.hf import RLKForCausalLM


@strict
class RLKLlamaConfig(LlamaConfig):
    model_type = "rlk_llama"
    rlk_qk_norm = False
    rlk_backend: str = "reference"
    rlk_fingerprint: dict | None = None
    rlk_check_fingerprint: bool = True
    rlk_strict: bool = False


class RLKLlamaForCausalLM(RLKForCausalLM):
    config_class = RLKLlamaConfig


__all__ = ["RLKLlamaConfig", "RLKLlamaForCausalLM"]
