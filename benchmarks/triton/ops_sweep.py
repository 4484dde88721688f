"""H200 benchmark of the Triton RMSNorm, SiLU-mul, RoPE and embedding (bf16, Qwen3-8B sizes):
accuracy vs float64 and speed vs torch, forward and forward+backward. Measures only (row
invariance and run-to-run bits are tests/gpu). Writes ``$OUT/ops_sweep.json``.
``--search``: also every RMSNorm backward tiling (``bwd_tile_candidates``) at the training step's widths
(M = 8192 x 4096, 16384 x 2048, and 262144 x 128: Qwen3-1.7B's q heads), the backward alone against
torch's, each checked run to run and against float64.

    python benchmarks/triton/ops_sweep.py [--search]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import bench, info, log, rel_err, save  # noqa: E402

from rlk_models.ops import rope_table  # noqa: E402

rn = importlib.import_module("rlk_models.ops.triton.rms_norm")  # the package re-exports a function of that name
from rlk_models.ops.triton import silu_mul  # noqa: E402
from rlk_models.ops.triton.embedding import embedding  # noqa: E402
from rlk_models.ops.triton.rms_norm import add_rms_norm, rms_norm  # noqa: E402
from rlk_models.ops.triton.rope import rope  # noqa: E402


def check(name, fn, ref64, torch_fn, make, res, params=()):
    x_full = make(8192)
    full = fn(x_full)
    r = {"rel_err_vs_fp64": rel_err(full[:256], ref64(x_full[:256].double())),
         "torch_rel_err_vs_fp64": rel_err(torch_fn(x_full[:256]), ref64(x_full[:256].double()))}
    g = torch.randn_like(full)
    for m in (1, 1024, 8192):
        xm = x_full[:m]
        t_ours = bench(lambda: fn(xm), warmup=25, rep=100)
        t_torch = bench(lambda: torch_fn(xm), warmup=25, rep=100)
        r[f"M{m}"] = {"ours_us": t_ours * 1e3, "torch_us": t_torch * 1e3, "ratio": t_ours / t_torch}
    xt = x_full.clone().requires_grad_()
    t_fb = bench(lambda: torch.autograd.grad(fn(xt), xt, g), warmup=10, rep=50)
    t_fb_torch = bench(lambda: torch.autograd.grad(torch_fn(xt), xt, g), warmup=10, rep=50)
    r["fwd_bwd_M8192"] = {"ours_us": t_fb * 1e3, "torch_us": t_fb_torch * 1e3, "ratio": t_fb / t_fb_torch}
    for p in params:  # as in training: the weight's gradient too (torch skips it above, and so do we)
        p.requires_grad_()
        t_fb = bench(lambda: torch.autograd.grad(fn(xt), [xt, p], g), warmup=10, rep=50)
        t_fb_torch = bench(lambda: torch.autograd.grad(torch_fn(xt), [xt, p], g), warmup=10, rep=50)
        r["fwd_bwd_dw_M8192"] = {"ours_us": t_fb * 1e3, "torch_us": t_fb_torch * 1e3, "ratio": t_fb / t_fb_torch}
        p.requires_grad_(False)
    res[name] = r
    print(f"{name}: rel err {r['rel_err_vs_fp64']:.2e} (torch "
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
    cos, sin = table[pos][:, None, :64].double(), table[pos][:, None, 64:].double()
    want = torch.cat([xd[..., :64] * cos - xd[..., 64:] * sin, xd[..., 64:] * cos + xd[..., :64] * sin], -1)
    r = {"rel_err_vs_fp64": rel_err(full, want)}
    for m in (1, 1024, 8192):
        t_ours = bench(lambda: rope(x[:m], pos[:m], table), warmup=25, rep=100)
        t_torch = bench(lambda: _torch_rope(x[:m], pos[:m], table), warmup=25, rep=100)
        r[f"M{m}"] = {"ours_us": t_ours * 1e3, "torch_eager_us": t_torch * 1e3, "ratio": t_ours / t_torch}
    res["rope_32x128"] = r
    print("rope:", r, flush=True)


def check_fusions(res, dev, g, w, wh, sizes=(1, 64, 256, 1024)):
    """The decode path's two launch cuts at the op level, natively: the residual add inside the
    norm (``add_rms_norm``) against the add and the norm apart (ours, and torch's add +
    F.rms_norm), and Qwen3's q/k norm read in place in the qkv rows against norming a copy --
    each with its bits against the unfused form (the contract says equal)."""
    r = {}
    for m in sizes:
        x, s0 = (torch.randn(m, 4096, device=dev, generator=g).bfloat16() for _ in range(2))
        y, s = add_rms_norm(x, s0, w, 1e-6)
        same = torch.equal(s, x + s0) and torch.equal(y, rms_norm(x + s0, w, 1e-6))
        t_fused = bench(lambda: add_rms_norm(x, s0, w, 1e-6), warmup=25, rep=100)
        t_apart = bench(lambda: rms_norm(x + s0, w, 1e-6), warmup=25, rep=100)
        t_torch = bench(lambda: F.rms_norm(x + s0, (4096,), w, 1e-6), warmup=25, rep=100)
        qkv = torch.randn(m, (32 + 8 + 8) * 128, device=dev, generator=g).bfloat16()
        q = qkv[:, :4096].view(m, 32, 128)
        same_q = torch.equal(rms_norm(q, wh, 1e-6), rms_norm(q.contiguous(), wh, 1e-6))
        t_inplace = bench(lambda: rms_norm(q, wh, 1e-6), warmup=25, rep=100)
        t_copy = bench(lambda: rms_norm(q.contiguous(), wh, 1e-6), warmup=25, rep=100)
        r[f"M{m}"] = {"add_rms_norm_us": t_fused * 1e3, "add_then_rms_norm_us": t_apart * 1e3,
                      "torch_add_then_rms_norm_us": t_torch * 1e3, "fused_equals_apart": same,
                      "q_norm_in_place_us": t_inplace * 1e3, "q_norm_of_copy_us": t_copy * 1e3,
                      "in_place_equals_copy": same_q}
    res["fusions"] = r
    print("fusions:", r, flush=True)


def check_embedding(res, dev, g):
    w = torch.randn(151936, 4096, device=dev, generator=g).bfloat16()
    ids = torch.randint(0, 151936, (8192,), device=dev, generator=g)
    ids[::7] = 11  # a frequent id
    wg = w.clone().requires_grad_()
    dy = torch.randn(8192, 4096, device=dev, generator=g).bfloat16()
    grad = torch.autograd.grad(embedding(ids, wg), wg, dy)[0]
    want = torch.zeros(151936, 4096, dtype=torch.float64, device=dev).index_add_(0, ids, dy.double())
    r = {"bwd_rel_err_vs_fp64": rel_err(grad, want)}
    t_ours = bench(lambda: torch.autograd.grad(embedding(ids, wg), wg, dy), warmup=5, rep=20)
    t_torch = bench(lambda: torch.autograd.grad(F.embedding(ids, wg), wg, dy), warmup=5, rep=20)
    r["fwd_bwd_M8192"] = {"ours_us": t_ours * 1e3, "torch_us": t_torch * 1e3, "ratio": t_ours / t_torch}
    res["embedding_151936x4096"] = r
    print("embedding:", r, flush=True)


def search_rms_backward(res, dev, g, w, m=8192):
    """Each backward tiling of a norm of width w.numel(): time of the backward kernels alone (dx and
    dw) against torch's (autograd of F.rms_norm, forward excluded), run-to-run bits, error vs fp64."""
    d = w.numel()
    x = torch.randn(m, d, device=dev, generator=g).bfloat16()
    dy = torch.randn(m, d, device=dev, generator=g).bfloat16()
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    want_dx, want_dw = torch.autograd.grad(wd * (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)),
                                           [xd, wd], dy.double())
    xt, wt = x.clone().requires_grad_(), w.clone().requires_grad_()
    yt = F.rms_norm(xt, (d,), wt, 1e-6)
    t_torch = bench(lambda: torch.autograd.grad(yt, [xt, wt], dy, retain_graph=True), warmup=10, rep=50)
    r = {"torch_us": t_torch * 1e3, "default": str(rn._bwd_tile(d)), "tiles": {}}
    for tile in [rn._bwd_tile(d)] + [c for c in rn.bwd_tile_candidates(d) if c != rn._bwd_tile(d)]:
        try:
            a = rn._backward(dy, x, w, rstd, True, tile)
        except Exception as e:  # noqa: BLE001 (a tiling that does not compile or fit is skipped, and said so)
            r["tiles"][str(tile)] = {"error": f"{type(e).__name__}: {e}"[:200]}
            continue
        b = rn._backward(dy, x, w, rstd, True, tile)
        t = bench(lambda: rn._backward(dy, x, w, rstd, True, tile), warmup=10, rep=50)
        r["tiles"][str(tile)] = {"us": t * 1e3, "ratio_vs_torch": t / t_torch,
                                 "run_to_run": all(torch.equal(p, q) for p, q in zip(a, b)),
                                 "dx_rel_err": rel_err(a[0], want_dx), "dw_rel_err": rel_err(a[1], want_dw)}
        log(f"rms_norm backward D={d} {tile}: {t * 1e3:7.1f} us ({t / t_torch:4.2f}x torch)")
    best = min((k for k, v in r["tiles"].items() if "us" in v and v["run_to_run"]),
               key=lambda k: r["tiles"][k]["us"])
    r["best"] = best
    log(f"rms_norm backward D={d} M={m}: torch {t_torch * 1e3:.1f} us, default {r['default']} "
        f"{r['tiles'][r['default']]['ratio_vs_torch']:.2f}x, best {best} {r['tiles'][best]['ratio_vs_torch']:.2f}x")
    res[f"rms_norm_backward_search_{d}"] = r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--search", action="store_true", help="time every RMSNorm backward tiling")
    args = ap.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    res = {"info": info()}
    log(res["info"])
    w = (1 + 0.1 * torch.randn(4096, device=dev, generator=g)).bfloat16()
    wh = (1 + 0.1 * torch.randn(128, device=dev, generator=g)).bfloat16()

    def ref_rms(x, weight):
        return weight.double() * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    check("rms_norm_hidden_4096", lambda x: rms_norm(x, w, 1e-6), lambda x: ref_rms(x, w),
          lambda x: F.rms_norm(x, (4096,), w, 1e-6),
          lambda m: torch.randn(m, 4096, device=dev, generator=g).bfloat16(), res, params=[w])
    check("rms_norm_heads_32x128", lambda x: rms_norm(x, wh, 1e-6), lambda x: ref_rms(x, wh),
          lambda x: F.rms_norm(x, (128,), wh, 1e-6),
          lambda m: torch.randn(m, 32, 128, device=dev, generator=g).bfloat16(), res, params=[wh])
    check("silu_mul_12288", silu_mul, lambda gu: F.silu(gu[:, :12288]) * gu[:, 12288:],
          lambda gu: F.silu(gu[:, :12288]) * gu[:, 12288:],
          lambda m: (2 * torch.randn(m, 24576, device=dev, generator=g)).bfloat16(), res)
    check_rope(res, dev, g)
    check_fusions(res, dev, g, w, wh)
    check_embedding(res, dev, g)
    if args.search:
        for d, m in ((4096, 8192), (2048, 16384), (128, 262144)):
            search_rms_backward(res, dev, g, (1 + 0.1 * torch.randn(d, device=dev, generator=g)).bfloat16(), m)
    save("ops_sweep", res)


if __name__ == "__main__":
    main()
