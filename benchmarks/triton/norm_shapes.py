"""The decoder's three norm launches at a training step's size, each against the memory it must move:
``add_rms_norm`` (residual add + hidden RMSNorm), the same without the add, and ``qk_norm_rope``
(Qwen3's q/k norms + RoPE, read in place from the qkv rows), beside torch's add then ``F.rms_norm``
and a plain copy of the same bytes (the bandwidth this GPU reaches). The 8B forward-only profile of
session 25 put ``_rms_fwd`` at 28.3 ms for 109 launches (about 2x what the bytes need at copy speed);
this says which launch is off (session 26: ``qk_norm_rope``, at 0.79 TB/s while its int64 row
division was a subroutine call a row), and times the backward launches the same way: each at every
depth of its loads' pipeline (``--stages``; the same bits at each, checked).

    python benchmarks/triton/norm_shapes.py --tokens 16384 --shapes 8b,1.7b --stages 1,2,3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import bench_graph, info, log, save  # noqa: E402

from rlk_models.ops import rope_table  # noqa: E402
from rlk_models.ops.triton.rms_norm import (  # noqa: E402
    _backward,
    add_rms_norm,
    qk_norm_rope,
    rms_norm,
    rms_norm_rope,
)
from rlk_models.ops.triton.rope import rope_backward  # noqa: E402

SHAPES = {"8b": (4096, 32, 8, 128), "1.7b": (2048, 16, 8, 128)}  # hidden, q heads, kv heads, head dim


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--shapes", default="8b,1.7b")
    ap.add_argument("--stages", default="1,2,3", help="the backward's load pipeline depths to time")
    args = ap.parse_args()
    dev, t = torch.device("cuda"), args.tokens
    res = {"info": info(), "tokens": t, "rows": []}
    log(res["info"])
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device=dev, generator=g).bfloat16()

    for name in args.shapes.split(","):
        hidden, hq, hkv, hd = SHAPES[name]
        x, r, w = rand(t, hidden), rand(t, hidden), rand(hidden)
        qkv = rand(t, (hq + 2 * hkv) * hd)
        q = qkv[:, :hq * hd].view(t, hq, hd)
        k = qkv[:, hq * hd:(hq + hkv) * hd].view(t, hkv, hd)
        wq, wk = rand(hd), rand(hd)
        pos = torch.arange(t, device=dev) % 2048
        table = rope_table(hd, 2048, {"rope_type": "default", "rope_theta": 1e6}).to(dev)
        big = rand(t, hidden * 2)
        qk = (hq + hkv) * hd * t * 2  # bytes of q and k
        dq, dk = rand(t, hq, hd), rand(t, hkv, hd)
        rq, rk = torch.rand(t * hq, device=dev) + 0.5, torch.rand(t * hkv, device=dev) + 0.5
        dy, ds, rstd = rand(t, hidden), rand(t, hidden), torch.rand(t, device=dev) + 0.5

        def qk_backward(stages):  # _QKNormRope.backward: each tensor's rope kernel, then its norm's backward
            out = []
            for d_, x_, w_, r_ in ((dq, q, wq, rq), (dk, k, wk, rk)):
                out += _backward(rope_backward(d_, pos, table), x_, w_, r_, True, heads=x_.shape[1], sx=x_.stride(0),
                                 stages=stages)
            return out

        cases = {  # name: (fn, bytes it must move)
            "add_rms_norm": (lambda: add_rms_norm(x, r, w, 1e-6), 4 * x.numel() * 2),
            "torch_add_then_rms_norm": (lambda: F.rms_norm(x + r, (hidden,), w, 1e-6), 5 * x.numel() * 2),
            "rms_norm": (lambda: rms_norm(x, w, 1e-6), 2 * x.numel() * 2),
            "torch_rms_norm": (lambda: F.rms_norm(x, (hidden,), w, 1e-6), 2 * x.numel() * 2),
            "qk_norm_rope": (lambda: qk_norm_rope(q, k, wq, wk, 1e-6, pos, table), 2 * qk),
            "rms_norm_rope_q": (lambda: rms_norm_rope(q, wq, 1e-6, pos, table), 2 * hq * hd * t * 2),
            "rope_backward_q": (lambda: rope_backward(dq, pos, table), 2 * hq * hd * t * 2),
            "copy_2_hidden": (lambda: big.clone(), 2 * big.numel() * 2),
        }
        for st in (int(v) for v in args.stages.split(",")):  # the backward launches at each load depth
            cases |= {
                # rope: dy in, out; norm: x, dy in, dx out
                f"qk_backward_s{st}": (lambda st=st: qk_backward(st), 2 * qk + 3 * qk),
                # _AddRMSNorm.backward: the norm's dx plus the residual stream's gradient ds, and dw (its fold too)
                f"add_rms_norm_backward_s{st}": (lambda st=st: _backward(dy, x, w, rstd, True, ds=ds, stages=st),
                                                 4 * x.numel() * 2),
                f"norm_backward_q_s{st}": (lambda st=st: _backward(dq, q, wq, rq, True, heads=hq, sx=q.stride(0),
                                                                    stages=st), 3 * hq * hd * t * 2),
            }
        for case, (fn, nbytes) in cases.items():
            ms = bench_graph(fn)
            row = {"shape": name, "case": case, "us": ms * 1e3, "tb_per_s": nbytes / ms / 1e9}
            res["rows"].append(row)
            log(f"{name:5} {case:24} {ms * 1e3:8.1f} us  {row['tb_per_s']:.2f} TB/s")

        def add_backward(st):  # the bits: every depth the same
            return _backward(dy, x, w, rstd, True, ds=ds, stages=st)

        want = {"qk": qk_backward(1), "add": add_backward(1)}
        for case, fn in {"qk": qk_backward, "add": add_backward}.items():
            for st in (int(v) for v in args.stages.split(",")):
                same = all(torch.equal(a, b) for a, b in zip(fn(st), want[case], strict=True))
                res["rows"].append({"shape": name, "case": f"bits_{case}_s{st}", "equal": same})
                log(f"{name:5} bits {case} stages {st}: {'equal' if same else 'DIFFER'}")
    save("norm_shapes", res)


if __name__ == "__main__":
    main()
