"""The Gluon matmul with and without its solo tiles (``matmul_sm90.SOLO_TILES``), in one process, on the same operands.
A 128-row tile's two consumers take 64 rows each; where the last row tile's second 64 rows lie past M (257-320 rows,
385-448, ...), the form before session 56 ran that consumer's dots on zeros, its turns interleaved with the first's.
A solo tile is the first consumer's alone, its dots issued without turns, the second only freeing each K slot.
(Session 56's first try, 399cda8, kept the turns and passed them through the idle consumer: slower, o 8B at 257 rows
24.2 -> 28.5 us.) Each point first checks the two forms' outputs bitwise (``torch.equal``), then times cuBLAS, the
form before ("before") and the solo tiles ("after") in rounds, round-robin (``matmul_sweep.retime``), on ``--copies``
copies of the operands at other addresses (session 56: at 257 rows one launch's time moved by up to 20% with where its
operands lay, each copy's own rounds within 3%).

    python benchmarks/triton/matmul_solo.py --shapes o,down,o_1.7b,down_1.7b --m 256,257,320 --copies 3
    python benchmarks/triton/matmul_solo.py --launch "Launch((128, 128, 12, 5), sm90=True)" --shapes down_1.7b
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import info, log, save  # noqa: E402
from matmul_sweep import ROW_PARALLEL, SHAPES, parse_launch, retime  # noqa: E402
from matmul_variance import pad_bytes  # noqa: E402

from rlk_models.ops.triton import matmul_sm90  # noqa: E402
from rlk_models.ops.triton.matmul import launch_for, matmul  # noqa: E402

SIDES = ("cublas", "before", "after")


def product(x: torch.Tensor, w: torch.Tensor, rp: bool, launch, solo: bool):
    """The product in ``launch`` (None: the default) with the solo tiles on or off: set where it is called, so a CUDA
    graph captures the form it names."""
    def fn():
        matmul_sm90.SOLO_TILES = solo
        return matmul(x, w, row_parallel=rp, launch=launch)
    return fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="o,down,o_1.7b,down_1.7b", help="comma-separated subset of " + ",".join(SHAPES))
    ap.add_argument("--m", default="256,257,320", help="comma-separated rows")
    ap.add_argument("--launch", default="", help="a Launch(...) every point runs (default: each point's own)")
    ap.add_argument("--copies", type=int, default=3, help="copies of the operands at other addresses a point")
    ap.add_argument("--rounds", type=int, default=3, help="timings of each side a copy, round-robin")
    args = ap.parse_args()
    shapes = args.shapes.split(",")
    if unknown := [s for s in shapes if s not in SHAPES]:
        ap.error(f"unknown shapes {unknown}: choose from {sorted(SHAPES)}")
    if args.copies < 1 or args.rounds < 1:
        ap.error("--copies and --rounds must be at least 1")
    forced = parse_launch(args.launch) if args.launch else None
    res = {"info": info(), "launch": args.launch, "rows": []}
    try:
        for shape in shapes:
            k, n = SHAPES[shape]
            rp = shape in ROW_PARALLEL
            for m in map(int, args.m.split(",")):
                g = torch.Generator(device="cuda").manual_seed(m)
                x0 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
                w0 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
                lc = forced or launch_for(m, n, 8 if rp else 1, k)
                row = {"shape": shape, "m": m, "n": n, "k": k, "launch": str(lc), "copies": []}
                kept = []
                for c in range(args.copies):
                    pad = torch.empty(pad_bytes(c), dtype=torch.uint8, device="cuda") if c else None
                    x, w = x0.clone(), w0.clone()
                    kept += [pad, x, w]
                    fns = {"cublas": lambda x=x, w=w: F.linear(x, w), "before": product(x, w, rp, forced, False),
                           "after": product(x, w, rp, forced, True)}
                    if not torch.equal(fns["before"](), fns["after"]()):
                        raise AssertionError(f"{shape} M={m}: the solo tiles changed the product's bits ({lc})")
                    runs = retime(fns, args.rounds)
                    row["copies"].append({s: runs[s] for s in SIDES} | {"x_ptr": x.data_ptr()})
                med = {s: median(median(cp[s]) for cp in row["copies"]) for s in SIDES}
                row |= {"median_ms": med, "after_over_before": med["after"] / med["before"],
                        "before_x": med["before"] / med["cublas"], "after_x": med["after"] / med["cublas"]}
                res["rows"].append(row)
                per_copy = " ".join(f"{median(cp['before']) * 1e3:.1f}->{median(cp['after']) * 1e3:.1f}"
                                    for cp in row["copies"])
                log(f"{shape:9s} M={m:5d} cuBLAS {med['cublas'] * 1e3:6.1f} us  before {med['before'] * 1e3:6.1f} "
                    f"({row['before_x']:.2f}x)  after {med['after'] * 1e3:6.1f} ({row['after_x']:.2f}x)  "
                    f"after/before {row['after_over_before']:.3f}  copies {per_copy} us  {lc}")
                save("matmul_solo", res)
    finally:
        matmul_sm90.SOLO_TILES = True
    save("matmul_solo", res)


if __name__ == "__main__":
    main()
