"""The GPU benchmarks' timing helpers that run on any machine: the L2-cold copies and their rotation
(benchmarks/harness.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import harness  # noqa: E402


def test_l2_cold_copies_pass_twice_the_cache():
    w = torch.randn(64, 32)  # 8 KiB
    copies = harness.l2_cold_copies(w, l2_bytes=20_000)
    assert len(copies) == 5  # 5 x 8,192 B >= 2 x 20,000 B, 4 copies would not be
    assert copies[0] is w and all(torch.equal(c, w) and c.data_ptr() != w.data_ptr() for c in copies[1:])
    assert len(harness.l2_cold_copies(w, l2_bytes=10)) == 2  # a weight over the cache still alternates


def test_bench_graph_cold_calls_each_copy_in_turn(monkeypatch):
    seen = []

    def fake_bench_graph(fn, rep=50):  # do_bench_cudagraph calls fn once, then captures it again and again
        for _ in range(7):
            fn()
        return 1.0

    monkeypatch.setattr(harness, "bench_graph", fake_bench_graph)
    ops = [torch.zeros(1) for _ in range(3)]
    assert harness.bench_graph_cold(lambda op: seen.append(id(op)), ops) == 1.0
    assert seen == [id(ops[i % 3]) for i in range(7)]
