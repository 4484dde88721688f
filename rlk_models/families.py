"""The model families (``modeling.family.Family``), by name: the one list everything reads."""

from .llama import FAMILY as LLAMA
from .modeling.family import Family
from .qwen3 import FAMILY as QWEN3

FAMILIES: dict[str, Family] = {f.name: f for f in (QWEN3, LLAMA)}


def by_hf_model_type(model_type: str) -> Family | None:
    return next((f for f in FAMILIES.values() if f.hf_model_type == model_type), None)


def by_model_type(model_type: str) -> Family | None:
    return next((f for f in FAMILIES.values() if f.model_type == model_type), None)


__all__ = ["FAMILIES", "Family", "by_hf_model_type", "by_model_type"]
