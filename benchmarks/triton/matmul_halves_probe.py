"""What a row-parallel layer would cost with two K-groups (the TP=2 halves) instead of eight: a probe
for a contract decision, not a kernel of the contract.

Today (contract version 4) o_proj and down_proj fold 8 K-group partials (two halves of four). A tile
then keeps three fp32 accumulators (the group's part, the running half, the first half), which rules
out the 128 x 256 tiles the plain layers use; session 18 measured the whole large-M gap (o 8B 1.26x,
down 8B 1.14x cuBLAS at M = 4096) to be that tile (``matmul_fold_cost.py``). With only the halves --
``y = (0 + h0) + h1``, each half one K chain from zero, what ``mm(..., groups=2)`` computes -- a tile
needs one accumulator if it stashes h0 in an fp32 scratch slot of its own (written once, read back
after the second half, mostly from L2: no second register tile). TP=2 keeps its one fp32 all-reduce of
the halves; TP=4/8 could no longer own whole groups (the cost of the change).

This times, under CUDA graphs, against cuBLAS: the stash kernel below at 128 x 256 (and 128 x 128),
``mm`` with 2 groups at its default launch, ``mm`` with today's 8 groups (what the layer runs), and
the plain K order's default; and checks the stash kernel bitwise against ``mm(..., groups=2)``.

    python benchmarks/triton/matmul_halves_probe.py --m 1024,4096,16384 --shapes o,down,o_1.7b,down_1.7b
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import bench_graph, info, log, save  # noqa: E402
from matmul_sweep import SHAPES  # noqa: E402

from rlk_models.ops.triton.matmul import _group_tma, _tile_coords, k_groups, mm  # noqa: E402
from rlk_models.ops.triton.utils import BLOCK_K, fit_stages  # noqa: E402


@triton.jit
def _column_halves(acc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A [BLOCK_M, BLOCK_N] tile as its left and right [BLOCK_M, BLOCK_N / 2] halves."""
    return tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))


@triton.jit
def _halves_stash_kernel(a_desc, b_desc, c_desc, stash_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """One tile a program: the first half's K chain, stashed in the tile's fp32 slot (``stash_ptr``:
    [tiles, BLOCK_M, BLOCK_N]; read back moments later, from L2), then the second half's chain in the
    same accumulator, y = (0 + h0) + h1. Each chain is ``mm``'s own (``_group_tma``). In two column
    halves, so that a stash half and the whole accumulator are the most in registers at once. (A
    persistent tile loop spilled 512 bytes at 128 x 256 for sm_90; this form builds 169 registers,
    none spilled.)"""
    tile = tl.program_id(0)
    pid_m, pid_n = _tile_coords(tile, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    half = K // 2
    base = stash_ptr + tile.to(tl.int64) * BLOCK_M * BLOCK_N
    slot_lo = base + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N // 2)[None, :]
    acc = _group_tma(a_desc, b_desc, pid_m, pid_n, 0, half, half, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32),
                     False, False, BLOCK_M, BLOCK_N, BLOCK_K, False)
    lo, hi = _column_halves(acc, BLOCK_M, BLOCK_N)
    tl.store(slot_lo, 0.0 + lo)
    tl.store(slot_lo + BLOCK_N // 2, 0.0 + hi)
    acc = _group_tma(a_desc, b_desc, pid_m, pid_n, half, K, half, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32),
                     False, False, BLOCK_M, BLOCK_N, BLOCK_K, False)
    lo, hi = _column_halves(acc, BLOCK_M, BLOCK_N)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], (tl.load(slot_lo) + lo).to(c_desc.dtype))
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], (tl.load(slot_lo + BLOCK_N // 2) + hi)
                 .to(c_desc.dtype))


def halves_stash(x: torch.Tensor, w: torch.Tensor, config=(128, 256, 8, 3)) -> torch.Tensor:
    from triton.tools.tensor_descriptor import TensorDescriptor

    m, k = x.shape
    n = w.shape[0]
    if k % (2 * BLOCK_K):
        raise ValueError(f"K={k}: each half must be whole K-tiles of {BLOCK_K}")
    bm, bn, warps, stages = config
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    stash = torch.empty(tiles, bm, bn, dtype=torch.float32, device=x.device)
    _halves_stash_kernel[(tiles,)](
        TensorDescriptor.from_tensor(x, [bm, BLOCK_K]), TensorDescriptor.from_tensor(w, [bn, BLOCK_K]),
        TensorDescriptor.from_tensor(out, [bm, bn // 2]), stash, m, n, k, bm, bn, BLOCK_K, 8, num_warps=warps,
        num_stages=fit_stages(bm + bn, x.element_size(), stages, bm * bn * out.element_size()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", default="1024,4096,16384")
    ap.add_argument("--shapes", default="o,down,o_1.7b,down_1.7b")
    args = ap.parse_args()
    dev = torch.device("cuda")
    res = {"info": info(), "rows": []}
    log(res["info"])
    g = torch.Generator(device=dev).manual_seed(0)
    for name in args.shapes.split(","):
        k, n = SHAPES[name]
        w = (torch.randn(n, k, device=dev, generator=g) / k**0.5).bfloat16()
        for m in map(int, args.m.split(",")):
            x = torch.randn(m, k, device=dev, generator=g).bfloat16()
            want = mm(x, w, groups=2)
            bits = {str(c): torch.equal(halves_stash(x, w, c), want) for c in ((128, 256, 8, 3), (128, 128, 8, 4))}
            t = {"cublas": bench_graph(lambda: F.linear(x, w)),
                 "stash_128x256": bench_graph(lambda: halves_stash(x, w)),
                 "stash_128x128": bench_graph(lambda: halves_stash(x, w, (128, 128, 8, 4))),
                 "mm_2_groups": bench_graph(lambda: mm(x, w, groups=2)),
                 "mm_8_groups": bench_graph(lambda: mm(x, w, groups=k_groups(k))),
                 "plain": bench_graph(lambda: mm(x, w, groups=1))}
            row = {"shape": name, "m": m, "ms": t, "vs_cublas": {key: v / t["cublas"] for key, v in t.items()},
                   "stash_equals_mm_2_groups": bits}
            res["rows"].append(row)
            r = row["vs_cublas"]
            log(f"{name:10} M={m:6}: cuBLAS {t['cublas'] * 1e3:8.1f} us; stash 128x256 {r['stash_128x256']:.2f}x, "
                f"128x128 {r['stash_128x128']:.2f}x; mm 2 groups {r['mm_2_groups']:.2f}x; today's 8 groups "
                f"{r['mm_8_groups']:.2f}x; plain {r['plain']:.2f}x; stash bitwise mm(groups=2): {bits}")
    save("matmul_halves_probe", res)


if __name__ == "__main__":
    main()
