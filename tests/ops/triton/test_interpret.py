"""The Triton kernels' logic on CPU under TRITON_INTERPRET=1 (small shapes). Matmul: every tile
config gives the same bits, a row alone equals the row inside any batch, close to float64.
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


def check_head(dtype_name: str) -> None:
    import torch

    from rlk_models.ops import get_backend
    from rlk_models.ops.triton.logprob_head import logprob_head_forward

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
    print("OK")
