"""Qwen3: Llama plus per-head q/k RMSNorm before RoPE and an explicit head_dim."""

from huggingface_hub.dataclasses import strict
from transformers import Qwen3Config

from ..modeling.config import RLKConfigFields
from ..modeling.family import Family
from ..modeling.hf import RLKForCausalLM


@strict
class RLKQwen3Config(Qwen3Config, RLKConfigFields):
    model_type = "rlk_qwen3"
    rlk_qk_norm = True


class RLKQwen3ForCausalLM(RLKForCausalLM):
    config_class = RLKQwen3Config


FAMILY = Family(
    name="qwen3", hf_model_type="qwen3", hf_architecture="Qwen3ForCausalLM", config_cls=RLKQwen3Config,
    training_cls=RLKQwen3ForCausalLM,
    tiny=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=32, max_position_embeddings=512, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
              initializer_range=0.05, tie_word_embeddings=False, rms_norm_eps=1e-6))

__all__ = ["FAMILY", "RLKQwen3Config", "RLKQwen3ForCausalLM"]
