"""Reference ops against float64 formulas (forward and backward). Tolerances: fp32 inputs,
fp32 accumulation over reductions of <= a few hundred terms -> relative error ~1e-7..1e-6;
we allow 2e-5 (norm-wise), far below anything a model would notice and far above rounding
noise, so a wrong formula (missing scale, wrong rotation sign, wrong head) fails."""

import pytest
import torch
import torch.nn.functional as F

from rlk_models.ops import get_backend, rope_table

ops = get_backend("reference")
TOL = 2e-5


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def rand(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def ref_attention(q, k, v, cu, scale):
    outs = []
    rep = q.shape[1] // k.shape[1]
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        qs, ks, vs = q[a:b].transpose(0, 1), k[a:b].repeat_interleave(rep, 1).transpose(0, 1), \
            v[a:b].repeat_interleave(rep, 1).transpose(0, 1)
        s = qs @ ks.transpose(1, 2) * scale
        s = s.masked_fill(torch.ones(b - a, b - a, dtype=torch.bool).triu(1), float("-inf"))
        outs.append((s.softmax(-1) @ vs).transpose(0, 1))
    return torch.cat(outs)


def ref_head(h, w, tgt, vocab):
    lsm = (h @ w[:vocab].T).log_softmax(-1)
    return lsm.gather(1, tgt[:, None])[:, 0], -(lsm.exp() * lsm).sum(-1)


TABLE = rope_table(16, 64, {"rope_type": "default", "rope_theta": 1e4})
POS = torch.tensor([0, 5, 63, 2, 9, 9])


def ref_rope(x, pos):
    cs = TABLE.double()[pos][:, None]
    c, s = cs[..., :8], cs[..., 8:]
    x1, x2 = x[..., :8], x[..., 8:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


CU = torch.tensor([0, 7, 8, 30])
CASES = {
    "linear": (lambda x, w, b: ops.linear(x, w, b), lambda x, w, b: x @ w.T + b,
               [rand(13, 123), rand(29, 123, seed=1), rand(29, seed=2)]),
    "linear_row_parallel": (lambda x, w, b: ops.linear(x, w, b, row_parallel=True), lambda x, w, b: x @ w.T + b,
                            [rand(13, 123), rand(29, 123, seed=1), rand(29, seed=2)]),
    "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-6),
                 lambda x, w: w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
                 [rand(13, 64, scale=3), rand(64, seed=1)]),
    "silu_mul": (ops.silu_mul, lambda gu: F.silu(gu[:, :40]) * gu[:, 40:], [rand(13, 80, scale=4)]),
    "rope": (lambda x: ops.rope(x, POS, TABLE), lambda x: ref_rope(x, POS), [rand(6, 3, 16)]),
    "attention": (lambda q, k, v: ops.varlen_attention(q, k, v, CU, 0.3),
                  lambda q, k, v: ref_attention(q, k, v, CU, 0.3),
                  [rand(30, 4, 16), rand(30, 2, 16, seed=1), rand(30, 2, 16, seed=2)]),
    "logprob_head": (lambda h, w: torch.stack(ops.logprob_head(h, w, torch.arange(9) * 77 % 700, 700, True)),
                     lambda h, w: torch.stack(ref_head(h, w, torch.arange(9) * 77 % 700, 700)),
                     [rand(9, 32), rand(703, 32, seed=1)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_backward_vs_float64(name):
    ours, ref, inputs = CASES[name]
    xs = [x.clone().requires_grad_() for x in inputs]
    xd = [x.double().clone().requires_grad_() for x in inputs]
    out, out_ref = ours(*xs), ref(*xd)
    assert rel(out, out_ref) < TOL
    g = rand(*out.shape, seed=7)
    out.backward(g)
    out_ref.backward(g.double())
    for a, b in zip(xs, xd):
        assert rel(a.grad, b.grad) < TOL, (name, rel(a.grad, b.grad))


def test_embedding_forward_and_backward():
    w = rand(6, 4).requires_grad_()
    ids = torch.tensor([[1, 5, 1], [0, 1, 5]])
    out = ops.embedding(ids, w)
    assert torch.equal(out, w[ids])
    g = rand(2, 3, 4, seed=3)
    out.backward(g)
    expect = torch.zeros(6, 4, dtype=torch.float64).index_add_(0, ids.reshape(-1), g.reshape(-1, 4).double())
    assert rel(w.grad, expect) < 1e-7
    with pytest.raises(IndexError, match="token ids"):
        ops.embedding(torch.tensor([6]), w)


def test_rope_llama3_inv_freq_matches_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    cfg = LlamaConfig(hidden_size=128, num_attention_heads=4, head_dim=32, max_position_embeddings=512,
                      rope_parameters=params)
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    from rlk_models.ops.rope_table import rope_inv_freq
    assert rel(rope_inv_freq(32, params), theirs) < 1e-6


def test_rope_table_does_not_depend_on_length_threads_or_device_context():
    p = {"rope_type": "default", "rope_theta": 1e6}
    a = rope_table(128, 1000, p)
    torch.set_num_threads(1)
    b = rope_table(128, 4099, p)
    assert torch.equal(a, b[:1000])
    with torch.device("meta"):  # how transformers builds models: the table is still computed on the CPU
        c = rope_table(128, 1000, p)
    assert c.device.type == "cpu" and torch.equal(a, c)
