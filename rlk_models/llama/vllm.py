"""The vLLM-side Llama class (registered as architecture ``RLKLlamaForCausalLM``)."""

from ..modeling.vllm import RLKVllmForCausalLM


class RLKLlamaForCausalLM(RLKVllmForCausalLM):
    pass
