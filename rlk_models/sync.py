"""Weight sync for RL: push a training model's weights into a running in-process ``vllm.LLM``.

    from rlk_models.sync import push_weights
    push_weights(llm, model)          # an RLK*ForCausalLM (or any module with rlk names)
    push_weights(llm, state_dict)     # or a dict / iterable of (name, tensor)

The tensors go straight to the vLLM class's ``load_weights`` inside the engine's worker (no
checkpoint on disk), then the prefix cache is reset so that no KV block computed with the
old weights is reused: the next ``generate`` runs exactly the new weights.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

import torch
from torch import nn


def _load(items: list[tuple[str, torch.Tensor]], vllm_model) -> int:
    return len(vllm_model.load_weights(iter(items)))


def named_weights(source: nn.Module | Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]):
    """(name, detached CPU tensor) pairs of a module's parameters, a state dict or pairs."""
    if isinstance(source, nn.Module):
        pairs = source.named_parameters()
    elif isinstance(source, Mapping):
        pairs = source.items()
    else:
        pairs = source
    return [(name, t.detach().to("cpu")) for name, t in pairs]


@torch.no_grad()
def push_weights(llm, source) -> int:
    """Load ``source``'s weights into ``llm`` and reset its prefix cache. Returns the number
    of tensors loaded (per worker, the first worker's count)."""
    items = named_weights(source)
    counts = llm.apply_model(functools.partial(_load, items))
    if not llm.reset_prefix_cache():
        raise RuntimeError("vLLM refused to reset its prefix cache (requests still running?)")
    return counts[0]
