"""Where the fused q/k norm + RoPE (``qk_norm_rope``: q's and k's heads in one forward launch) and two
``rms_norm_rope`` calls differ, on a grid of the small shapes the hypothesis contract test draws
(tests/ops/test_contract.py::test_qk_norm_rope_is_rms_norm_rope_of_q_and_of_k: up to 9 tokens, 1-4 q
heads and 1-2 k heads, head dims 2 to 128). Each case prints which of yq, yk, the rows' gradient,
dwq and dwk are not bitwise equal, so one run says whether a failure is the forward's or the
backward's and at which shapes.

    python benchmarks/triton/qk_norm_probe.py          # natively; TRITON_INTERPRET=1 on CPU (fp32, fp16)

Under the interpreter bf16 is left out: it has no bfloat16 arithmetic (triton-lang/triton#11584),
and its bf16 norms are garbage (NaN, 1e36), which torch.equal reports as differences.
"""

from __future__ import annotations

import itertools
import json
import os

import torch

from rlk_models.ops import get_backend, rope_table

DEV = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


def rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype).to(DEV)


def case(ops, t, hq, hk, d, dtype, seed=0) -> list[str]:
    """The names of the outputs that differ (the contract test's tensors and seeds)."""
    rows = rand(t, (hq + 2 * hk) * d, dtype=dtype, seed=seed, scale=3)
    wq, wk = rand(d, dtype=dtype, seed=seed + 1), rand(d, dtype=dtype, seed=seed + 2)
    table = rope_table(d, 64, {"rope_type": "default", "rope_theta": 1e4}).to(DEV)
    pos = torch.randint(0, 64, (t,), generator=torch.Generator().manual_seed(seed)).to(DEV)
    gq, gk = rand(t, hq, d, seed=seed + 3), rand(t, hk, d, seed=seed + 4)

    def run(fused):
        rl, wql, wkl = (v.detach().clone().requires_grad_() for v in (rows, wq, wk))
        q, k = rl[:, :hq * d].view(t, hq, d), rl[:, hq * d:(hq + hk) * d].view(t, hk, d)
        ys = (ops.qk_norm_rope(q, k, wql, wkl, 1e-6, pos, table) if fused else
              (ops.rms_norm_rope(q, wql, 1e-6, pos, table), ops.rms_norm_rope(k, wkl, 1e-6, pos, table)))
        return (*ys, *torch.autograd.grad(ys, (rl, wql, wkl), (gq.to(dtype), gk.to(dtype))))

    names = ("yq", "yk", "drows", "dwq", "dwk")
    return [n for n, a, b in zip(names, run(True), run(False), strict=True) if not torch.equal(a, b)]


def main() -> None:
    ops = get_backend("triton")
    out = []
    shapes = [(1, 1, 1), (3, 1, 2), (5, 4, 1), (9, 3, 2), (2, 2, 2), (7, 4, 2)]
    dtypes = (torch.float32, torch.float16) + ((torch.bfloat16,) if DEV == "cuda" else ())
    for (t, hq, hk), d, dtype in itertools.product(shapes, (2, 16, 64, 128), dtypes):
        differ = case(ops, t, hq, hk, d, dtype)
        out.append({"t": t, "hq": hq, "hk": hk, "d": d, "dtype": str(dtype), "differ": differ})
        print(f"t={t} hq={hq} hk={hk} d={d:3} {str(dtype):14} {'DIFFER ' + ','.join(differ) if differ else 'equal'}",
              flush=True)
    print(json.dumps({"cases": len(out), "differ": sum(bool(r["differ"]) for r in out)}))


if __name__ == "__main__":
    main()
