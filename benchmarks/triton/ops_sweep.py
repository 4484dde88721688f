"""H200 sweep for the Triton RMSNorm, SiLU-mul, RoPE and embedding: bitwise row invariance,
run-to-run forward and backward, accuracy vs float64, speed vs torch. Writes
``$OUT/ops_sweep.json``.

    python benchmarks/triton/ops_sweep.py
"""

from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

from rlk_models.ops import rope_table
from rlk_models.ops.triton.embedding import embedding
from rlk_models.ops.triton.rms_norm import rms_norm
from rlk_models.ops.triton.rope import rope
from rlk_models.ops.triton.silu_mul import silu_mul

M_INV = [1, 2, 3, 7, 16, 64, 255, 1024, 4096, 8192]


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def check(name, fn, ref64, torch_fn, make, res):
    x_full = make(8192)
    rows0 = [fn(x_full[:m])[0] for m in M_INV]
    full = fn(x_full)
    r = {"row0_equal_across_M": all(torch.equal(rows0[0], t) for t in rows0),
         "full_equals_batches_of_7": all(torch.equal(fn(x_full[i:i + 7]), full[i:i + 7]) for i in (0, 7, 4093, 8185)),
         "run_to_run_fwd": torch.equal(fn(x_full), full),
         "rel_err_vs_fp64": rel(full[:256], ref64(x_full[:256].double())),
         "torch_rel_err_vs_fp64": rel(torch_fn(x_full[:256]), ref64(x_full[:256].double()))}
    xg = x_full.clone().requires_grad_()
    g = torch.randn_like(full)
    grads = [torch.autograd.grad(fn(xg), xg, g)[0] for _ in range(2)]
    r["run_to_run_bwd"] = torch.equal(grads[0], grads[1])
    for m in (1, 1024, 8192):
        xm = x_full[:m]
        t_ours = do_bench(lambda: fn(xm), warmup=25, rep=100, return_mode="median")
        t_torch = do_bench(lambda: torch_fn(xm), warmup=25, rep=100, return_mode="median")
        r[f"M{m}"] = {"ours_us": t_ours * 1e3, "torch_us": t_torch * 1e3, "ratio": t_ours / t_torch}
    xt = x_full.clone().requires_grad_()
    t_fb = do_bench(lambda: torch.autograd.grad(fn(xt), xt, g), warmup=10, rep=50, return_mode="median")
    t_fb_torch = do_bench(lambda: torch.autograd.grad(torch_fn(xt), xt, g), warmup=10, rep=50, return_mode="median")
    r["fwd_bwd_M8192"] = {"ours_us": t_fb * 1e3, "torch_us": t_fb_torch * 1e3, "ratio": t_fb / t_fb_torch}
    res[name] = r
    ok = r["row0_equal_across_M"] and r["full_equals_batches_of_7"] and r["run_to_run_fwd"] and r["run_to_run_bwd"]
    print(f"{name}: invariance {'OK' if ok else 'FAILED'}; rel err {r['rel_err_vs_fp64']:.2e} (torch "
          f"{r['torch_rel_err_vs_fp64']:.2e}); " + "; ".join(f"{k} {v['ours_us']:.1f}us vs torch {v['torch_us']:.1f}us "
                                                             f"({v['ratio']:.2f}x)" for k, v in r.items()
                                                             if isinstance(v, dict)), flush=True)


def _torch_rope(x, pos, table):
    cs = table[pos][:, None, :]
    c, s = cs[..., :64], cs[..., 64:]
    x1, x2 = x[..., :64].float(), x[..., 64:].float()
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(x.dtype)


def check_rope(res, dev, g):
    table = rope_table(128, 40960, {"rope_type": "default", "rope_theta": 1e6}).to(dev)
    x = torch.randn(8192, 32, 128, device=dev, generator=g).bfloat16()
    pos = torch.randint(0, 40960, (8192,), device=dev, generator=g)
    full = rope(x, pos, table)
    xd = x.double()
    want = torch.cat([xd[..., :64] * table[pos][:, None, :64].double() - xd[..., 64:] * table[pos][:, None, 64:].double(),
                      xd[..., 64:] * table[pos][:, None, :64].double() + xd[..., :64] * table[pos][:, None, 64:].double()], -1)
    xg = x.clone().requires_grad_()
    dy = torch.randn_like(full)
    r = {"row0_equal_across_M": all(torch.equal(rope(x[:m], pos[:m], table)[0], full[0]) for m in M_INV),
         "full_equals_batches_of_7": all(torch.equal(rope(x[i:i + 7], pos[i:i + 7], table), full[i:i + 7])
                                         for i in (0, 7, 4093, 8185)),
         "run_to_run_fwd": torch.equal(rope(x, pos, table), full),
         "run_to_run_bwd": torch.equal(*(torch.autograd.grad(rope(xg, pos, table), xg, dy)[0] for _ in range(2))),
         "rel_err_vs_fp64": rel(full, want)}
    for m in (1, 1024, 8192):
        t_ours = do_bench(lambda: rope(x[:m], pos[:m], table), warmup=25, rep=100, return_mode="median")
        t_torch = do_bench(lambda: _torch_rope(x[:m], pos[:m], table), warmup=25, rep=100, return_mode="median")
        r[f"M{m}"] = {"ours_us": t_ours * 1e3, "torch_eager_us": t_torch * 1e3, "ratio": t_ours / t_torch}
    res["rope_32x128"] = r
    print("rope:", r, flush=True)


def check_embedding(res, dev, g):
    w = torch.randn(151936, 4096, device=dev, generator=g).bfloat16()
    ids = torch.randint(0, 151936, (8192,), device=dev, generator=g)
    ids[::7] = 11  # a frequent id
    wg = w.clone().requires_grad_()
    dy = torch.randn(8192, 4096, device=dev, generator=g).bfloat16()
    grads = [torch.autograd.grad(embedding(ids, wg), wg, dy)[0] for _ in range(2)]
    want = torch.zeros(151936, 4096, dtype=torch.float64, device=dev).index_add_(0, ids, dy.double())
    r = {"forward_is_gather": torch.equal(embedding(ids, w), w[ids]),
         "run_to_run_bwd": torch.equal(grads[0], grads[1]), "bwd_rel_err_vs_fp64": rel(grads[0], want)}
    t_ours = do_bench(lambda: torch.autograd.grad(embedding(ids, wg), wg, dy), warmup=5, rep=20, return_mode="median")
    t_torch = do_bench(lambda: torch.autograd.grad(F.embedding(ids, wg), wg, dy), warmup=5, rep=20, return_mode="median")
    r["fwd_bwd_M8192"] = {"ours_us": t_ours * 1e3, "torch_us": t_torch * 1e3, "ratio": t_ours / t_torch}
    res["embedding_151936x4096"] = r
    print("embedding:", r, flush=True)


def main() -> None:
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    res = {"info": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}}
    print(res["info"], flush=True)
    w = (1 + 0.1 * torch.randn(4096, device=dev, generator=g)).bfloat16()
    wh = (1 + 0.1 * torch.randn(128, device=dev, generator=g)).bfloat16()

    def ref_rms(x, weight):
        return weight.double() * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    check("rms_norm_hidden_4096", lambda x: rms_norm(x, w, 1e-6), lambda x: ref_rms(x, w),
          lambda x: F.rms_norm(x, (4096,), w, 1e-6), lambda m: torch.randn(m, 4096, device=dev, generator=g).bfloat16(), res)
    check("rms_norm_heads_32x128", lambda x: rms_norm(x, wh, 1e-6), lambda x: ref_rms(x, wh),
          lambda x: F.rms_norm(x, (128,), wh, 1e-6),
          lambda m: torch.randn(m, 32, 128, device=dev, generator=g).bfloat16(), res)
    check("silu_mul_12288", silu_mul, lambda gu: F.silu(gu[:, :12288]) * gu[:, 12288:],
          lambda gu: F.silu(gu[:, :12288]) * gu[:, 12288:],
          lambda m: (2 * torch.randn(m, 24576, device=dev, generator=g)).bfloat16(), res)
    check_rope(res, dev, g)
    check_embedding(res, dev, g)
    with open(os.path.join(os.environ.get("OUT", "."), "ops_sweep.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
