"""Our training classes against transformers' own Qwen3/Llama on the same weights.

Tolerances (norm-wise relative error):
- fp32: 1e-5 for logits/loss, 1e-4 for gradients. Both models compute in fp32; they differ
  only in summation order, our exp/log (~1 ulp), and RoPE angles (float64 tables here, fp32
  in transformers) -- rounding-level differences amplified a little through 2 layers.
- bf16: 3e-2 for logits/loss/gradients. bf16 has 8 mantissa bits (eps 3.9e-3); both models
  round every linear, norm and residual output to bf16 but at slightly different points
  (e.g. we round RoPE/SiLU-mul once, transformers rounds twice), so differences of a few eps
  per layer are expected. Measured: ~0.6-0.8e-2 on logits.
"""

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlk_models.conversion.maps import FUSED

TOL = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (3e-2, 3e-2)}


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def hf_grads(model):
    """transformers' gradients, fused into rlk's tensor names."""
    g = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    out = dict(g)
    for rlk, parts in FUSED.items():
        for name in list(g):
            if name.endswith(parts[0]):
                head = name[: -len(parts[0])]
                if all(head + p in g for p in parts):
                    out[head + rlk] = torch.cat([g[head + p] for p in parts])
                    for p in parts:
                        out.pop(head + p)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("variant", ["qwen3", "qwen3_tied", "llama3", "llama_bias"])
def test_logits_loss_grads_close_to_transformers(checkpoints, variant, dtype):
    hf_dir, rlk_dir = checkpoints[variant]
    theirs = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype)
    ours = AutoModelForCausalLM.from_pretrained(rlk_dir, dtype=dtype, rlk_check_fingerprint=False)  # fp32 study
    assert type(ours).__name__.startswith("RLK")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, theirs.config.vocab_size, (3, 70), generator=g)  # 70 > original context of llama3 scaling
    mask = torch.ones_like(ids)
    mask[1, 50:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    a = theirs(ids, attention_mask=mask, labels=labels)
    b = ours(ids, attention_mask=mask, labels=labels)
    tol, gtol = TOL[dtype]
    m = mask.bool()
    assert rel(b.logits[m], a.logits.float()[m]) < tol
    assert abs(b.loss.item() - a.loss.item()) / a.loss.item() < tol
    a.loss.backward()
    b.loss.backward()
    want = hf_grads(theirs)
    got = {n: p.grad for n, p in ours.named_parameters() if p.grad is not None}
    assert set(got) == set(want)
    worst = max((rel(got[n], want[n]), n) for n in got)
    assert worst[0] < gtol, worst
