"""The vLLM head's stats launch (``shard_stats(..., keep_logits=True)``, as ``modeling/vllm.py`` calls
it) at decode batch sizes, with h and W loaded by TMA and by pointers: GPU time (CUDA events over
20 calls) and host time per eager call. Session 19's 8B engine run showed the decode step at
batch 256 at 2.3x stock vLLM after the stats kernel took TMA loads from 128 rows.

    python benchmarks/triton/head_tma_probe.py
"""

from __future__ import annotations

import importlib
import json
import time

import torch

head = importlib.import_module("rlk_models.ops.triton.logprob_head")
K, V = 4096, 151936


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(V, K, device="cuda", generator=g) * 0.02).bfloat16()
    out, default = {}, head.STATS_TMA_ROWS
    for t in (64, 128, 256, 512):
        h = torch.randn(t, K, device="cuda", generator=g).bfloat16()
        for loads, rows in (("tma", 1), ("pointer", 1 << 62)):
            head.STATS_TMA_ROWS = rows
            fn = lambda: head.shard_stats(h, w, (0, 153600), V, None, with_entropy=False, keep_logits=True)  # noqa: E731
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            a.record()
            for _ in range(20):
                fn()
            b.record()
            host = (time.perf_counter() - t0) / 20 * 1e6
            torch.cuda.synchronize()
            out[f"T{t} {loads}"] = {"per_call_us": round(a.elapsed_time(b) / 20 * 1e3, 1), "host_us": round(host, 1)}
            print(f"T={t} {loads}: {out[f'T{t} {loads}']}", flush=True)
        head.STATS_TMA_ROWS = default
    print(json.dumps(out))


if __name__ == "__main__":
    main()
