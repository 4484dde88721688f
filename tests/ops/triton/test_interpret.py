"""The Triton kernels' logic on CPU under TRITON_INTERPRET=1 (small shapes). Matmul: every tile
config and the split-K form give the same bits, a row alone equals the row inside any batch,
close to float64, tensor-parallel shards (k = 2, 4, 8) reproduce TP=1, backward close to float64.
Attention: training (varlen) vs paged prefill / token-by-token decode / mixed chunked steps with
random block tables are bitwise equal per token, close to the reference backend, backward close
to it. RoPE and embedding: reference bits (elementwise / same order). Whole tiny Qwen3: training
log-probs == the paged runner's, close to the reference backend's.
RMSNorm and SiLU-mul: rows alone equal rows in a batch, forward and backward agree with the
reference backend. Fused log-prob head forward: rows alone equal rows in a batch, close to
float64 and to the reference head, for vocabs of one tile, one group and several groups. The interpreter has no bfloat16 arithmetic (triton-lang/triton#11584), so
this runs fp16 and fp32; bf16, TMA and speed are checked on the H200
(benchmarks/triton/{matmul,ops,head}_sweep.py).

TRITON_INTERPRET must be set before triton is first imported, so the checks run in a fresh
process (``python -m tests.ops.triton.test_interpret``)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TOL = {"float32": 1e-5, "float16": 2e-3}  # fp32 accumulation; fp16 output rounding (2^-11)


def check(dtype_name: str, k: int) -> None:
    import torch

    from rlk_models.ops.triton.matmul import CONFIGS, matmul

    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(k)
    x = torch.randn(37, k, generator=g).to(dtype)
    w = (torch.randn(45, k, generator=g) * 0.1).to(dtype)
    b = torch.randn(45, generator=g).to(dtype)
    outs = [matmul(x, w, b, config=c, tma=False) for c in sorted(set(CONFIGS.values()))]
    assert all(torch.equal(outs[0], o) for o in outs[1:]), "tile configs disagree"
    for i in (0, 5, 36):
        assert torch.equal(matmul(x[i:i + 1], w, b, tma=False)[0], outs[0][i]), f"row {i} alone"
        assert torch.equal(matmul(x[i:i + 3], w, b, tma=False), outs[0][i:i + 3]), f"rows {i}.. in a batch of 3"
    ref = x.double() @ w.double().T + b.double()
    err = float((outs[0].double() - ref).norm() / ref.norm())
    assert err < TOL[dtype_name], err
    assert matmul(x, w, out_dtype=torch.float32, tma=False).dtype == torch.float32


def check_rows_ops(dtype_name: str) -> None:
    import torch

    from rlk_models.ops import get_backend
    from rlk_models.ops.triton.rms_norm import rms_norm
    from rlk_models.ops.triton.silu_mul import silu_mul

    ref = get_backend("reference")
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(80, generator=g).to(dtype).requires_grad_()
    cases = [("rms_norm", lambda t: rms_norm(t, w, 1e-6), lambda t: ref.rms_norm(t, w, 1e-6), (37, 80)),
             ("rms_norm_heads", lambda t: rms_norm(t, w, 1e-6), lambda t: ref.rms_norm(t, w, 1e-6), (9, 3, 80)),
             ("silu_mul", silu_mul, ref.silu_mul, (37, 150))]
    for name, fn, reference, shape in cases:
        x = (torch.randn(*shape, generator=g) * 2).to(dtype).requires_grad_()
        y, yr = fn(x), reference(x)
        for i in (0, 4, shape[0] - 1):
            assert torch.equal(fn(x[i:i + 1])[0], y[i]), f"{name}: row {i} alone"
        assert float((y.double() - yr.double()).norm() / yr.double().norm()) < TOL[dtype_name], name
        gy = torch.randn(y.shape, generator=g).to(dtype)
        got = torch.autograd.grad(y, [x, w] if name.startswith("rms") else [x], gy)
        want = torch.autograd.grad(yr, [x, w] if name.startswith("rms") else [x], gy)
        again = torch.autograd.grad(fn(x), [x, w] if name.startswith("rms") else [x], gy)
        for a, b, c in zip(got, want, again):
            assert torch.equal(a, c), f"{name}: backward not deterministic"
            assert float((a.double() - b.double()).norm() / b.double().norm()) < 10 * TOL[dtype_name], name


def check_matmul_tp_and_backward(dtype_name: str) -> None:
    import torch

    from rlk_models.ops import get_backend

    tri = get_backend("triton")
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(3)
    k = 1024  # 8 groups of 2 K-tiles
    x = torch.randn(19, k, generator=g).to(dtype)
    w = (torch.randn(33, k, generator=g) * 0.1).to(dtype)
    b = torch.randn(33, generator=g).to(dtype)
    full = tri.linear(x, w, b)
    for tp in (2, 4, 8):
        sl = [slice(i * k // tp, (i + 1) * k // tp) for i in range(tp)]
        parts = torch.stack([tri.shard_partial(x[:, s], w[:, s], tp) for s in sl])
        assert torch.equal(tri.combine_partials(parts, b, dtype), full), f"TP={tp}"
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    dy = torch.randn(19, 33, generator=g).to(dtype)
    got = torch.autograd.grad(tri.linear(xr, wr, br), [xr, wr, br], dy)
    want = torch.autograd.grad(torch.nn.functional.linear(xr.double(), wr.double(), br.double()), [xr, wr, br],
                               dy.double())
    for a, c in zip(got, want):
        assert float((a.double() - c).norm() / c.norm()) < 10 * TOL[dtype_name]


def check_attention(dtype_name: str) -> None:
    import torch

    from rlk_models.ops import get_backend
    from rlk_models.ops.paged import paged_steps, random_block_table
    from rlk_models.ops.triton.attention import paged_attention, varlen_attention

    ref = get_backend("reference")
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(4)
    lens, hq, hkv, d = [5, 70, 1, 33], 4, 2, 16
    t = sum(lens)
    q, k, v = (torch.randn(t, h, d, generator=g).to(dtype) for h in (hq, hkv, hkv))
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist())
    o = varlen_attention(q, k, v, cu, d ** -0.5)
    assert torch.equal(varlen_attention(q, k, v, cu, d ** -0.5, config=(32, 4, 1)), o), "training BLOCK_M"
    o_ref = ref.varlen_attention(q, k, v, cu, d ** -0.5)
    assert float((o.double() - o_ref.double()).abs().max()) < 10 * TOL[dtype_name]
    for bs in (16, 128):
        bt, n_blocks = random_block_table(lens, bs, g)
        cache = torch.full((n_blocks, hkv, bs, 2 * d), float("nan")).to(dtype)
        out = torch.full_like(q, float("nan"))
        chunks = iter([3, 1, 1, 40, 1, 7, 1, 1, 64, 2] * 20)
        for idx, rows, seq_lens, qsl in paged_steps(cache, k, v, cu, lens, bt, lambda n: next(chunks)):
            args = (cache, rows, seq_lens, qsl, d ** -0.5)  # every step mixes decodes and chunks
            out[idx] = paged_attention(q[idx], *args)
            assert torch.equal(ref.paged_attention(q[idx], *args), o_ref[idx]), "reference paged"
        assert torch.equal(out, o), f"paged (block size {bs}) != training"
    qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
    do = torch.randn(t, hq, d, generator=g).to(dtype)
    got = torch.autograd.grad(varlen_attention(qr, kr, vr, cu, d ** -0.5), [qr, kr, vr], do)
    again = torch.autograd.grad(varlen_attention(qr, kr, vr, cu, d ** -0.5), [qr, kr, vr], do)
    want = torch.autograd.grad(ref.varlen_attention(qr, kr, vr, cu, d ** -0.5), [qr, kr, vr], do)
    for a, b2, c in zip(got, again, want):
        assert torch.equal(a, b2), "attention backward not deterministic"
        assert float((a.double() - c.double()).norm() / c.double().norm()) < 10 * TOL[dtype_name]


def check_rope_embedding() -> None:
    import torch

    from rlk_models.ops import get_backend, rope_table

    ref, tri = get_backend("reference"), get_backend("triton")
    g = torch.Generator().manual_seed(5)
    table = rope_table(32, 64, {"rope_type": "default", "rope_theta": 1e4})
    x = torch.randn(9, 3, 32, generator=g).requires_grad_()
    pos = torch.randint(0, 64, (9,), generator=g)
    y, yr = tri.rope(x, pos, table), ref.rope(x, pos, table)
    assert float((y - yr).abs().max()) < 1e-6 and torch.equal(tri.rope(x[2:3], pos[2:3], table)[0], y[2])
    dy = torch.randn(9, 3, 32, generator=g)
    assert float((torch.autograd.grad(y, x, dy)[0] - torch.autograd.grad(yr, x, dy)[0]).abs().max()) < 1e-6
    w = torch.randn(50, 20, generator=g).requires_grad_()
    ids = torch.randint(0, 50, (30,), generator=g)
    ge = torch.randn(30, 20, generator=g)
    assert torch.equal(torch.autograd.grad(tri.embedding(ids, w), w, ge)[0],
                       torch.autograd.grad(ref.embedding(ids, w), w, ge)[0]), "embedding backward order"


def check_model() -> None:
    import torch

    from rlk_models.modeling.paged import PagedRunner, training_logprobs
    from rlk_models.qwen3 import RLKQwen3Config, RLKQwen3ForCausalLM
    from rlk_models.tiny import TINY_QWEN3

    torch.manual_seed(0)
    model = RLKQwen3ForCausalLM(RLKQwen3Config(**dict(TINY_QWEN3, vocab_size=300), rlk_backend="triton")).eval()
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (70, 3, 20)]
    want = training_logprobs(model, seqs)
    got = PagedRunner(model, block_size=16).logprobs(seqs, prefill_lens=[40, 1, 0], token_budget=24,
                                                     arrivals=[0, 1, 2])
    assert all(torch.equal(a, b) for a, b in zip(want, got)), "paged runner != training (triton)"
    ref = RLKQwen3ForCausalLM(RLKQwen3Config(**dict(TINY_QWEN3, vocab_size=300))).eval()
    ref.load_state_dict(model.state_dict())
    assert max(float((a - b).abs().max()) for a, b in zip(want, training_logprobs(ref, seqs))) < 1e-4


def check_head(dtype_name: str) -> None:
    import torch

    from rlk_models.ops import get_backend
    import importlib

    logprob_head_forward = importlib.import_module("rlk_models.ops.triton.logprob_head").logprob_head_forward

    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(2)
    for vocab in (7, 700, 2100):  # one tile; tiles in one group; tiles in several groups
        h = torch.randn(37, 64, generator=g).to(dtype)
        w = (torch.randn(vocab + 5, 64, generator=g) * 0.3).to(dtype)  # + padding rows, never read
        tgt = torch.randint(0, vocab, (37,), generator=g)
        lp = logprob_head_forward(h, w, tgt, vocab)
        for i in (0, 5, 36):
            assert torch.equal(logprob_head_forward(h[i:i + 1], w, tgt[i:i + 1], vocab)[0], lp[i]), f"row {i}"
        want = (h.double() @ w[:vocab].double().T).log_softmax(-1).gather(1, tgt[:, None])[:, 0]
        assert float((lp.double() - want).abs().max()) < 1e-4, vocab
        ref, _ = get_backend("reference").logprob_head(h, w, tgt, vocab)
        assert float((lp - ref).abs().max()) < 1e-4, vocab


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_kernels_under_interpreter(dtype):
    pytest.importorskip("triton")
    r = subprocess.run([sys.executable, "-m", "tests.ops.triton.test_interpret", dtype], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1",
                                                            "PYTHONPATH": str(ROOT)}, timeout=600)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-3000:]


if __name__ == "__main__":
    for k in (64, 72, 200):
        check(sys.argv[1], k)
    check_rows_ops(sys.argv[1])
    check_head(sys.argv[1])
    check_matmul_tp_and_backward(sys.argv[1])
    check_attention(sys.argv[1])
    if sys.argv[1] == "float32":
        check_rope_embedding()
        check_model()
    print("OK")
