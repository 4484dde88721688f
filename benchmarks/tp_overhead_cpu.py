"""Cost at TP=1 of the canonical tensor-parallel reductions, reference backend on CPU.

Row-parallel linear: the canonical K reduction (8 contiguous groups, halving tree inside each,
adjacent tree across) against the plain reduction (one halving tree over all of K) -- the same
products, a different tree. Log-prob head: the canonical padded vocab (8 groups of whole tiles)
against a single flat tree over the same tiles. Median of repeated runs, one thread.

    python benchmarks/tp_overhead_cpu.py
"""

from __future__ import annotations

import importlib
import statistics
import time

import torch

from rlk_models.ops.reference.primitives import matmul_nt

head = importlib.import_module("rlk_models.ops.reference.logprob_head")  # the module, not the function


def median_ms(fn, reps=7):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    print(f"{'case':40} {'canonical ms':>12} {'plain ms':>9} {'ratio':>6}")
    for m, k, n in [(64, 512, 512), (256, 1024, 256), (16, 4096, 128)]:
        a = torch.randn(m, k, generator=g).bfloat16()
        b = torch.randn(n, k, generator=g).bfloat16()
        c, p = median_ms(lambda: matmul_nt(a, b, 8)), median_ms(lambda: matmul_nt(a, b, 1))
        print(f"{f'linear M={m} K={k} N={n}':40} {c:12.2f} {p:9.2f} {c / p:6.3f}")
    t, kk, v = 64, 128, 32000
    h = torch.randn(t, kk, generator=g).bfloat16()
    w = torch.randn(v, kk, generator=g).bfloat16()
    tgt = torch.randint(0, v, (t,), generator=g)
    canonical = median_ms(lambda: head.logprob_head(h, w, tgt, v), reps=3)
    groups = head.VOCAB_GROUPS
    try:  # plain: one flat tree over the tiles (what the head would do without TP in mind)
        head.VOCAB_GROUPS = 1
        plain = median_ms(lambda: head.logprob_head(h, w, tgt, v), reps=3)
    finally:
        head.VOCAB_GROUPS = groups
    print(f"{f'logprob_head T={t} K={kk} V={v}':40} {canonical:12.2f} {plain:9.2f} {canonical / plain:6.3f}")


if __name__ == "__main__":
    main()
