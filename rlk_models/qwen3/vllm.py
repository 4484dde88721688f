"""The vLLM-side Qwen3 class (registered as architecture ``RLKQwen3ForCausalLM``)."""

from ..modeling.vllm import RLKVllmForCausalLM


class RLKQwen3ForCausalLM(RLKVllmForCausalLM):
    pass
