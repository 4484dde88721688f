"""H200 benchmark of the batch-invariant Triton matmul against cuBLAS (Qwen3-8B shapes, bf16).

Measures only (the bitwise proof of every launch choice is tests/gpu/test_triton_contract_8b.py),
and writes ``$OUT/matmul_sweep.json``:
  1. accuracy: relative Frobenius error vs float64 at M=128 (ours and cuBLAS);
  2. speed: median time of cuBLAS ``F.linear`` and of ours, with the default config for M and
     with the best of ``CANDIDATE_CONFIGS``, for M in {1, 16, 128, 1024, 8192}; small M under
     CUDA graphs; forward + backward at M=4096.

    python benchmarks/triton/matmul_sweep.py [--quick] [--defaults-only]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import bench, bench_graph, info, log, rel_err, save  # noqa: E402

from rlk_models.ops.triton.matmul import CANDIDATE_CONFIGS, config_for, linear, matmul  # noqa: E402

SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 24576), "down": (12288, 4096),
          "lm_head": (4096, 151936)}
M_BENCH = [1, 16, 128, 1024, 8192]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="two shapes only")
    ap.add_argument("--defaults-only", action="store_true", help="time the default config only (no candidate search)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    res = {"info": info(), "shapes": {}}
    log(res["info"])
    shapes = dict(list(SHAPES.items())[:2]) if args.quick else SHAPES
    g = torch.Generator(device=dev).manual_seed(0)
    for name, (k, n) in shapes.items():
        x = torch.randn(8192, k, device=dev, generator=g).bfloat16()
        w = (torch.randn(n, k, device=dev, generator=g) * 0.02).bfloat16()
        ref64 = x[:128].double() @ w.double().T
        r = {"rel_err_vs_fp64_M128": rel_err(matmul(x[:128], w), ref64),
             "cublas_rel_err_vs_fp64_M128": rel_err(F.linear(x[:128], w), ref64)}
        timings = {}
        for m in M_BENCH:
            xm = x[:m]
            t_cublas = bench(lambda: F.linear(xm, w))
            t_default = bench(lambda: matmul(xm, w))
            best = (t_default, str(config_for(m, n)))
            for c in ([] if args.defaults_only else CANDIDATE_CONFIGS):
                for sp in ((False, True) if m <= 128 else (False,)):
                    try:
                        t = bench(lambda: matmul(xm, w, config=c, split=sp), warmup=10, rep=50)
                    except Exception as e:  # a config that does not compile/fit is skipped, and said so
                        log(f"skip {name} M={m} {c} split={sp}: {type(e).__name__}")
                        continue
                    best = min(best, (t, f"{c} split={sp}"))
            timings[m] = {"cublas_ms": t_cublas, "ours_default_ms": t_default, "ours_best_ms": best[0],
                          "best_config": best[1], "ratio_default": t_default / t_cublas,
                          "ratio_best": best[0] / t_cublas, "cublas_tflops": 2 * m * n * k / t_cublas / 1e9}
            log(f"{name:8} M={m:5}  cuBLAS {t_cublas * 1e3:9.1f} us  ours {t_default * 1e3:9.1f} us "
                f"({t_default / t_cublas:5.2f}x)  best {best[0] * 1e3:9.1f} us ({best[0] / t_cublas:5.2f}x) {best[1]}")
        r["timings"] = timings
        # small M under CUDA graphs (how vLLM runs decode): kernel time without Python launch cost
        for m in (1, 16, 128):
            xm = x[:m]
            t_cu = bench_graph(lambda: F.linear(xm, w))
            t_ours = bench_graph(lambda: matmul(xm, w))
            t_nosplit = bench_graph(lambda: matmul(xm, w, split=False))
            r[f"cudagraph_M{m}"] = {"cublas_ms": t_cu, "ours_default_ratio": t_ours / t_cu,
                                    "ours_nosplit_ratio": t_nosplit / t_cu}
            log(f"{name} M={m} cudagraph: cuBLAS {t_cu * 1e3:.1f} us, ours {t_ours / t_cu:.2f}x "
                f"(no split {t_nosplit / t_cu:.2f}x)")
        # backward: dx = dy @ w and dw = dy^T @ x (ours: same kernels on transposed layouts) vs cuBLAS
        m = 4096
        xg, wg = x[:m].clone().requires_grad_(), w.clone().requires_grad_()
        dy = torch.randn(m, n, device=dev, generator=g).bfloat16()
        t_ours = bench(lambda: torch.autograd.grad(linear(xg, wg), [xg, wg], dy), warmup=5, rep=30)
        t_cu = bench(lambda: torch.autograd.grad(F.linear(xg, wg), [xg, wg], dy), warmup=5, rep=30)
        dx = torch.autograd.grad(linear(xg, wg), [xg], dy)[0]
        r["bwd_M4096"] = {"ours_fwd_bwd_ms": t_ours, "cublas_fwd_bwd_ms": t_cu, "ratio": t_ours / t_cu,
                          "dx_rel_err_vs_fp64": rel_err(dx, dy.double() @ w.double())}
        log(f"{name}: fwd+bwd M=4096 ours {t_ours:.3f} ms vs cuBLAS {t_cu:.3f} ms ({t_ours / t_cu:.2f}x), "
            f"dx err {r['bwd_M4096']['dx_rel_err_vs_fp64']:.2e}; rel err vs fp64 {r['rel_err_vs_fp64_M128']:.2e} "
            f"(cuBLAS {r['cublas_rel_err_vs_fp64_M128']:.2e})")
        res["shapes"][name] = r
        del x, w, xg, wg, dy, dx
        torch.cuda.empty_cache()
    save("matmul_sweep", res)


if __name__ == "__main__":
    main()
