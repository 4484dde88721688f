"""What a model family is, stated once: ``Family`` (torchtitan's ``ModelSpec`` in spirit).

A family folder (``rlk_models/qwen3``, ``rlk_models/llama``) holds its config class, binds the
training class and the vLLM class, and exports one ``FAMILY``; ``rlk_models.families`` collects
them. Everything else -- Auto* registration, the vLLM plugin, conversion's model-type and
architecture maps, the tiny test checkpoints, the CLIs' ``--family`` choices -- reads the specs,
so a new dense family (Qwen2, Mistral) is one folder plus one line in ``families``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Family:
    name: str                  # "qwen3": the folder, the CLIs' --family
    hf_model_type: str         # transformers' model_type of the stock checkpoint ("qwen3")
    hf_architecture: str       # transformers' class of the stock checkpoint ("Qwen3ForCausalLM")
    config_cls: type           # the rlk config (model_type "rlk_<name>")
    training_cls: type         # the HF-style training class (its name is the rlk architecture)
    tiny: dict = field(default_factory=dict)  # config fields of the tiny test checkpoint

    @property
    def model_type(self) -> str:
        return self.config_cls.model_type

    @property
    def architecture(self) -> str:
        """The rlk architecture name: the training class and the vLLM class share it."""
        return self.training_cls.__name__

    @property
    def vllm_class(self) -> str:
        """``module:Class`` of the vLLM class, for vLLM's lazy model registry."""
        return f"rlk_models.{self.name}.vllm:{self.architecture}"
