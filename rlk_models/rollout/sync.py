"""Weight sync for RL: push a training model's weights into a running in-process ``vllm.LLM``.

    from rlk_models.rollout.sync import push_weights
    push_weights(llm, model)          # an RLK*ForCausalLM (or any module with the engine's names)
    push_weights(llm, state_dict)     # or a dict / iterable of (name, tensor)

Fail closed, lose nothing: the whole set is checked against the engine's model *before* the
engine is touched -- every expected tensor present, no unknown name, each shape the full
(unsharded) shape the engine's config implies, the engine's dtype, every value finite. A push
that fails any check raises ``WeightSyncError`` naming each bad tensor and leaves the engine
serving its old weights, bit for bit. (vLLM's own reload validates tensor by tensor as it copies:
a bad tensor midway leaves a half-loaded, unusable engine.)

A good set goes through vLLM's supported in-place reload (``Worker.reload_weights`` via
``collective_rpc``; no checkpoint on disk), which calls the model's ``load_weights`` and redoes any
post-load weight processing, then the prefix cache is reset so that no KV block computed with the
old weights is reused: the next ``generate`` runs exactly the new weights. Works for the rlk vLLM
classes (rlk names: fused ``qkv_proj``/``gate_up_proj``) and for stock vLLM models (transformers
names; the GRPO baseline uses it). An rlk model in an in-process engine (TRL's colocate mode,
``rlk-grpo``) has its ``load_weights`` called directly (``LLM.apply_model``), as TRL does for stock
models: its linear and embedding methods do no post-load processing, so the reload's layer-by-layer
bookkeeping around the same copies is pure cost (``benchmarks/push_weights.py``, 28 layers on CPU: the
reload 0.06-0.07 s against 0.006 s for the load itself).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import torch
from torch import nn

from ..conversion.maps import FUSION_HINT, IGNORED_SUFFIXES, UNFUSED_SUFFIXES, hf_tensor_shapes, rlk_tensor_shapes
from ..ops.fingerprint import dtype_name

log = logging.getLogger(__name__)


class _RopeCacheNotice(logging.Filter):
    """vLLM's in-place reload logs "RotaryEmbedding: Failed to load weights" for *stock* models at
    every push: their RoPE cos/sin cache is not a checkpoint tensor, so vLLM keeps the one it has,
    which is right (RoPE does not train; the GRPO stock runs learn as the rlk runs do after 200
    pushes). Drop that one record so a training loop's output stays readable; every other passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "%s: Failed to load weights" and record.args == ("RotaryEmbedding",))


logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(_RopeCacheNotice())


class WeightSyncError(ValueError):
    """A push refused before it touched the engine; the message names every bad tensor."""


def named_weights(source: nn.Module | Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
                  device: str | torch.device | None = "cpu"):
    """(name, detached tensor) pairs of a module's parameters, a state dict or pairs, moved to
    ``device`` (None: where they are)."""
    if isinstance(source, nn.Module):
        pairs = source.named_parameters()
    elif isinstance(source, Mapping):
        pairs = source.items()
    else:
        pairs = source
    return [(name, t.detach() if device is None else t.detach().to(device)) for name, t in pairs]


def engine_in_process(llm) -> bool:
    """Whether the engine's one worker runs in this process (an in-process engine core with a
    uniprocess executor: TRL's colocate mode, ``rlk-grpo``): then tensors reach ``load_weights``
    as they are, and a GPU trainer's weights are copied GPU to GPU by the model's weight loaders
    instead of through host memory (two 1.2 GB copies per push at the 0.6B shape). Otherwise the
    call crosses a process boundary and the tensors go as CPU tensors."""
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    return isinstance(getattr(llm.llm_engine, "model_executor", None), UniProcExecutor)


def engine_is_rlk(llm) -> bool:
    """Whether the engine runs an rlk vLLM class (an rlk checkpoint's ``rlk_*`` model type)."""
    return str(getattr(llm.llm_engine.model_config.hf_config, "model_type", "")).startswith("rlk_")


def engine_tensor_shapes(llm) -> tuple[dict[str, tuple[int, ...]], torch.dtype]:
    """The full tensor set (name -> unsharded shape) the engine's model loads, and its dtype."""
    mc = llm.llm_engine.model_config
    return (rlk_tensor_shapes(mc.hf_config) if engine_is_rlk(llm) else hf_tensor_shapes(mc.hf_config)), mc.dtype


def all_finite(tensors: list[torch.Tensor], by_norms: bool | None = None) -> list[bool]:
    """Whether each floating tensor's values are all finite, in one device-to-host read. ``by_norms`` (default: for
    CUDA tensors, where a launch costs more than reading the tensor) takes each tensor's L1 norm in a few
    multi-tensor launches, summed in fp32 (fp64 for fp64 tensors): finite exactly when the values are, unless the sum
    itself overflows -- so a tensor whose norm is not finite is confirmed element by element, and only a NaN or inf
    refuses it. Otherwise (CPU, where the element-wise check is the faster) each tensor's ``isfinite().all()``."""
    if not tensors:
        return []
    dev = tensors[0].device
    if not (dev.type == "cuda" if by_norms is None else by_norms):
        return torch.stack([torch.isfinite(t).all().to(dev) for t in tensors]).tolist()
    groups: dict[tuple, list[int]] = {}  # by device and width: one multi-tensor launch set and one stack each
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype == torch.float64), []).append(i)
    order, sums = [], []
    for (_, wide), idx in groups.items():
        norms = torch._foreach_norm([tensors[i] for i in idx], 1, **({} if wide else {"dtype": torch.float32}))
        sums.append(torch.stack(norms).to(device=dev, dtype=torch.float64))
        order += idx
    ok = dict(zip(order, torch.cat(sums).isfinite().tolist()))
    return [ok[i] or bool(torch.isfinite(t).all()) for i, t in enumerate(tensors)]


def check_weights(items: list[tuple[str, torch.Tensor]], expected: dict[str, tuple[int, ...]],
                  dtype: torch.dtype) -> None:
    """Raise ``WeightSyncError`` naming every problem of ``items`` against ``expected``."""
    problems, seen = [], set()
    floats = [i for i, (_, t) in enumerate(items) if t.is_floating_point()]
    finite = dict(zip(floats, all_finite([items[i][1] for i in floats])))
    for i, (name, t) in enumerate(items):
        if name.endswith(IGNORED_SUFFIXES):
            continue
        if name in seen:
            problems.append(f"{name}: given twice")
        seen.add(name)
        if name not in expected:
            hint = f" ({FUSION_HINT})" if name.endswith(UNFUSED_SUFFIXES) else ""
            problems.append(f"{name}: not a tensor of the engine's model{hint}")
            continue
        if tuple(t.shape) != tuple(expected[name]):
            problems.append(f"{name}: shape {tuple(t.shape)}, the engine's model needs {tuple(expected[name])}")
        elif t.dtype != dtype:
            problems.append(f"{name}: dtype {dtype_name(t.dtype)}, the engine runs {dtype_name(dtype)} "
                            "(cast the weights first; parity needs the engine's dtype)")
        elif t.is_floating_point() and not finite[i]:
            problems.append(f"{name}: has NaN or inf values")
    missing = sorted(set(expected) - seen)
    if missing:
        more = " ..." if len(missing) > 8 else ""
        problems.append(f"missing {len(missing)} tensor(s): {', '.join(missing[:8])}{more}"
                        " (a partial push would leave the engine serving a mix of old and new weights)")
    if problems:
        raise WeightSyncError("push_weights refused; the engine still serves its old weights:\n  "
                              + "\n  ".join(problems))


@torch.no_grad()
def push_weights(llm, source) -> int:
    """Check ``source``'s weights against ``llm``'s model (module docstring), load them and reset
    the prefix cache. Returns the number of tensors pushed; raises ``WeightSyncError`` (engine
    untouched) on any bad tensor."""
    in_process = engine_in_process(llm)
    items = named_weights(source, device=None if in_process else "cpu")
    expected, dtype = engine_tensor_shapes(llm)
    if llm.llm_engine.model_config.hf_config.tie_word_embeddings:  # a state dict lists the tied head too;
        items = [(n, t) for n, t in items if n != "lm_head.weight"]  # the engine would skip it
    check_weights(items, expected, dtype)
    if in_process and engine_is_rlk(llm):  # the same copies, without the reload's bookkeeping (docstring)
        llm.apply_model(lambda model: model.load_weights(items))
    else:
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": items})
    if not llm.reset_prefix_cache():
        raise RuntimeError("vLLM refused to reset its prefix cache (requests still running?)")
    log.info("push_weights: %d tensors, %.1f MB of %s", len(items),
             sum(t.numel() * t.element_size() for _, t in items) / 2**20, dtype_name(dtype))
    return len(items)
