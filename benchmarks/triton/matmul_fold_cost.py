"""What the canonical K-groups cost a row-parallel layer at large M, split into its two parts.

A row-parallel layer (o_proj, down_proj) folds 8 K-group partials; its default large-M launch is a
128 x 128 tile, where the plain (column-parallel) layers run 128 x 256. This times, under CUDA graphs at
one M per shape, against cuBLAS:

  grouped   the default launch, K in the 8 groups (what the layer runs);
  same/K1   the same launch with the plain K order (one group): the tile, no group folds;
  plain     the plain K order's own default launch (128 x 256 at large M).

grouped / same-K1 is the cost of the folds (each group's wgmma chain drains before its partial is
added); same-K1 / plain the cost of the smaller tile the three fp32 accumulators force.

``--split``: at decode sizes the default is split-K (a program per group or half writes its fp32 partial, then
``_fold_kernel`` folds them: a second kernel). For each M whose default splits, the whole launch, and the fold
kernel alone on a partial buffer of the same size under CUDA graphs: what folding in the first kernel (the last
program of a tile to finish folding its partials) could save at most.

    python benchmarks/triton/matmul_fold_cost.py --m 4096 --shapes o,down,o_1.7b,down_1.7b
    python benchmarks/triton/matmul_fold_cost.py --split --m 1,16,32,64,128,256
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import bench_graph, info, log, save  # noqa: E402
from matmul_sweep import SHAPES  # noqa: E402

from rlk_models.ops.triton.matmul import fold_partials, k_groups, launch_for, mm, run_of  # noqa: E402


def split_cost(ms: list[int], shapes: list[str], device: str = "cuda") -> dict:
    """Per row-parallel shape and M whose default launch is split-K: cuBLAS, the whole launch, the fold kernel
    alone (``matmul.fold``, as the launch runs it; us), and the whole launch less the fold against cuBLAS."""
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(0)
    res = {"info": info(), "shapes": {}}
    for name in shapes:
        k, n = SHAPES[name]
        groups = k_groups(k)
        x = torch.randn(max(ms), k, device=dev, generator=g).bfloat16()
        w = (torch.randn(n, k, device=dev, generator=g) / k**0.5).bfloat16()
        for m in ms:
            lc = launch_for(m, n, groups, k)
            if not lc.split:
                log(f"{name:10} M={m}: {lc} does not split")
                continue
            xm = x[:m]
            parts = groups // lc.split
            p = torch.randn(parts, m, n, device=dev, generator=g)
            out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            t = {"cublas": bench_graph(lambda: F.linear(xm, w)), "whole": bench_graph(lambda: mm(xm, w, groups=groups)),
                 "fold": bench_graph(lambda: fold_partials(p, out, None, parts, run_of(groups) // lc.split))}
            row = {"launch": str(lc), "us": {key: 1e3 * v for key, v in t.items()},
                   "whole_vs_cublas": t["whole"] / t["cublas"],
                   "without_fold_vs_cublas": (t["whole"] - t["fold"]) / t["cublas"]}
            res["shapes"][f"{name} M={m}"] = row
            log(f"{name:10} M={m}: cuBLAS {row['us']['cublas']:6.1f} us, whole {row['us']['whole']:6.1f} "
                f"({row['whole_vs_cublas']:.2f}x), fold alone {row['us']['fold']:5.1f}; less the fold "
                f"{row['without_fold_vs_cublas']:.2f}x  {lc}")
            del p, out
    save("matmul_split_cost", res)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", default="4096", help="one M, or with --split a comma-separated list")
    ap.add_argument("--shapes", default="o,down,o_1.7b,down_1.7b")
    ap.add_argument("--split", action="store_true", help="the split-K launches' fold kernel (decode sizes)")
    args = ap.parse_args()
    if args.split:
        split_cost([int(v) for v in args.m.split(",")], args.shapes.split(","))
        return
    args.m = int(args.m)
    dev = torch.device("cuda")
    res = {"info": info(), "m": args.m, "shapes": {}}
    log(res["info"])
    g = torch.Generator(device=dev).manual_seed(0)
    for name in args.shapes.split(","):
        k, n = SHAPES[name]
        x = torch.randn(args.m, k, device=dev, generator=g).bfloat16()
        w = (torch.randn(n, k, device=dev, generator=g) / k**0.5).bfloat16()
        groups = k_groups(k)
        grouped = launch_for(args.m, n, groups, k)
        plain = launch_for(args.m, n, 1, k)
        same_k1 = grouped._replace(split=0)
        t = {"cublas": bench_graph(lambda: F.linear(x, w)),
             "grouped": bench_graph(lambda: mm(x, w, groups=groups)),
             "same_k1": bench_graph(lambda: mm(x, w, groups=1, launch=same_k1)),
             "plain": bench_graph(lambda: mm(x, w, groups=1))}
        row = {"launch_grouped": str(grouped), "launch_plain": str(plain), "ms": t,
               "vs_cublas": {key: v / t["cublas"] for key, v in t.items()},
               "fold_cost": t["grouped"] / t["same_k1"], "tile_cost": t["same_k1"] / t["plain"]}
        res["shapes"][name] = row
        log(f"{name:10} M={args.m}: cuBLAS {t['cublas'] * 1e3:7.1f} us; grouped {row['vs_cublas']['grouped']:.2f}x, "
            f"same launch K1 {row['vs_cublas']['same_k1']:.2f}x, plain default {row['vs_cublas']['plain']:.2f}x; "
            f"folds {row['fold_cost']:.2f}x, tile {row['tile_cost']:.2f}x")
        del x, w
    save("matmul_fold_cost", res)


if __name__ == "__main__":
    main()
