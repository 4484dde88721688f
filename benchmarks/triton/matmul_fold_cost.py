"""What the canonical K-groups cost a row-parallel layer at large M, split into its two parts.

A row-parallel layer (o_proj, down_proj) folds 8 K-group partials; its default large-M launch is a
128 x 128 tile, where the plain (column-parallel) layers run 128 x 256. This times, under CUDA graphs at
one M per shape, against cuBLAS:

  grouped   the default launch, K in the 8 groups (what the layer runs);
  same/K1   the same launch with the plain K order (one group): the tile, no group folds;
  plain     the plain K order's own default launch (128 x 256 at large M).

grouped / same-K1 is the cost of the folds (each group's wgmma chain drains before its partial is
added); same-K1 / plain the cost of the smaller tile the three fp32 accumulators force.

    python benchmarks/triton/matmul_fold_cost.py --m 4096 --shapes o,down,o_1.7b,down_1.7b
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

from rlk_models.ops.triton.matmul import k_groups, launch_for, mm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--shapes", default="o,down,o_1.7b,down_1.7b")
    args = ap.parse_args()
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
