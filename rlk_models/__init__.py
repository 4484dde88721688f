"""rlk-models: deterministic, batch-invariant Qwen3/Llama whose training and vLLM rollout
log-probs agree bit for bit.

Importing the package registers the rlk configs and training classes with transformers'
``AutoConfig`` / ``AutoModelForCausalLM``.
"""

from transformers import AutoConfig, AutoModelForCausalLM

from .families import FAMILIES
from .llama import RLKLlamaConfig, RLKLlamaForCausalLM
from .qwen3 import RLKQwen3Config, RLKQwen3ForCausalLM

__version__ = "0.1.0"


def register_auto_classes() -> None:
    """Idempotent: make ``AutoConfig`` / ``AutoModelForCausalLM`` know the rlk model types."""
    for family in FAMILIES.values():
        AutoConfig.register(family.model_type, family.config_cls, exist_ok=True)
        AutoModelForCausalLM.register(family.config_cls, family.training_cls, exist_ok=True)


register_auto_classes()

__all__ = ["FAMILIES", "RLKLlamaConfig", "RLKLlamaForCausalLM", "RLKQwen3Config", "RLKQwen3ForCausalLM",
           "register_auto_classes"]
