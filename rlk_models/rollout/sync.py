"""Weight sync for RL: push a training model's weights into a running in-process ``vllm.LLM``.

    from rlk_models.rollout.sync import push_weights
    push_weights(llm, model)          # an RLK*ForCausalLM (or any module with rlk names)
    push_weights(llm, state_dict)     # or a dict / iterable of (name, tensor)

The tensors go through vLLM's supported in-place reload (``Worker.reload_weights`` via
``collective_rpc``; no checkpoint on disk), which calls the model's ``load_weights`` and redoes
any post-load weight processing (stock CPU layers prepack their weights; rlk layers do not),
then the prefix cache is reset so that no KV block computed with the old weights is reused:
the next ``generate`` runs exactly the new weights. Works for the rlk vLLM classes and for
stock vLLM models alike (the GRPO baseline uses it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn


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
    of tensors pushed."""
    items = named_weights(source)
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": items})
    if not llm.reset_prefix_cache():
        raise RuntimeError("vLLM refused to reset its prefix cache (requests still running?)")
    return len(items)
