"""Entry point of the ``vllm.general_plugins`` group (see pyproject.toml).

vLLM calls ``register()`` once in every process it starts (API server / LLM, engine core,
workers, the registry-inspection subprocess). It must stay idempotent, cheap and must not
initialise CUDA: it only registers names; the model and backend modules load lazily.
"""


def register() -> None:
    from vllm import ModelRegistry
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    import rlk_models  # registers the rlk config classes with transformers' AutoConfig

    for family in rlk_models.FAMILIES.values():
        if family.architecture not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(family.architecture, family.vllm_class)
    register_backend(AttentionBackendEnum.CUSTOM, "rlk_models.modeling.vllm_attention.RLKAttentionBackend")
