"""Declarative HF <-> rlk checkpoint maps.

rlk checkpoints keep transformers' tensor names except for two fusions, which match the
packed decoder (one GEMM each) and vLLM's own layer names:

    self_attn.qkv_proj.{weight,bias}  = cat(q_proj, k_proj, v_proj)   along dim 0
    mlp.gate_up_proj.{weight,bias}    = cat(gate_proj, up_proj)        along dim 0

Concatenation and slicing are exact, so HF -> rlk -> HF is bitwise on every tensor.
"""

from __future__ import annotations

# rlk suffix -> HF suffixes, in concatenation order
FUSED: dict[str, tuple[str, ...]] = {
    "self_attn.qkv_proj.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "self_attn.qkv_proj.bias": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
    "mlp.gate_up_proj.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
    "mlp.gate_up_proj.bias": ("mlp.gate_proj.bias", "mlp.up_proj.bias"),
}

# the HF tensor suffixes an rlk checkpoint fuses away, and what to tell whoever passes them
UNFUSED_SUFFIXES = tuple(s for parts in FUSED.values() for s in parts)
FUSION_HINT = ("rlk models load fused qkv_proj / gate_up_proj tensors, q/k/v and gate/up concatenated: "
               "convert HF-layout checkpoints with rlk-convert")

# tensors some checkpoints carry that are recomputed, never loaded
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def _qk_norm(config) -> bool:
    """Per-head q/k norms: the rlk config says so; a stock config's family does."""
    if hasattr(config, "rlk_qk_norm"):
        return bool(config.rlk_qk_norm)
    from ..families import by_hf_model_type

    family = by_hf_model_type(getattr(config, "model_type", None))
    if family is None:
        raise ValueError(f"unsupported model_type {getattr(config, 'model_type', None)!r}")
    return bool(family.config_cls.rlk_qk_norm)


def hf_tensor_shapes(config) -> dict[str, tuple[int, ...]]:
    """Every tensor a transformers Qwen3/Llama checkpoint of ``config`` (rlk or stock config)
    holds, with its shape."""
    h, d, inter = config.hidden_size, config.head_dim, config.intermediate_size
    hq, hkv, v = config.num_attention_heads, config.num_key_value_heads, config.vocab_size
    attn_bias, mlp_bias = config.attention_bias, getattr(config, "mlp_bias", False)
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        layer = {
            "input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
            "self_attn.q_proj.weight": (hq * d, h), "self_attn.k_proj.weight": (hkv * d, h),
            "self_attn.v_proj.weight": (hkv * d, h), "self_attn.o_proj.weight": (h, hq * d),
            "mlp.gate_proj.weight": (inter, h), "mlp.up_proj.weight": (inter, h),
            "mlp.down_proj.weight": (h, inter),
        }
        if attn_bias:
            layer.update({"self_attn.q_proj.bias": (hq * d,), "self_attn.k_proj.bias": (hkv * d,),
                          "self_attn.v_proj.bias": (hkv * d,), "self_attn.o_proj.bias": (h,)})
        if mlp_bias:
            layer.update({"mlp.gate_proj.bias": (inter,), "mlp.up_proj.bias": (inter,), "mlp.down_proj.bias": (h,)})
        if _qk_norm(config):
            layer.update({"self_attn.q_norm.weight": (d,), "self_attn.k_norm.weight": (d,)})
        shapes.update({p + k: s for k, s in layer.items()})
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, h)
    return shapes


def hf_to_rlk_plan(config) -> dict[str, tuple[str, ...]]:
    """rlk tensor name -> the HF tensor names it is made of (concatenated along dim 0)."""
    hf = hf_tensor_shapes(config)
    plan: dict[str, tuple[str, ...]] = {}
    fused_parts = set()
    for name in hf:
        for rlk_suffix, parts in FUSED.items():
            head = name[: -len(parts[0])] if name.endswith(parts[0]) else None
            if head is not None:
                srcs = tuple(head + p for p in parts)
                if all(s in hf for s in srcs):
                    plan[head + rlk_suffix] = srcs
                    fused_parts.update(srcs)
    for name in hf:
        if name not in fused_parts:
            plan[name] = (name,)
    return plan


def rlk_tensor_shapes(config) -> dict[str, tuple[int, ...]]:
    hf = hf_tensor_shapes(config)
    return {out: (sum(hf[s][0] for s in srcs), *hf[srcs[0]][1:]) for out, srcs in hf_to_rlk_plan(config).items()}
