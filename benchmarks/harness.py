"""The small harness every GPU benchmark shares: what ran where (``info``), timing (median of
``triton.testing.do_bench``, or of CUDA-graph replays), a flushed log line, and one JSON result
file under ``$OUT``. Benchmarks only measure; the bitwise contract is tests/gpu (marked gpu)."""

from __future__ import annotations

import itertools
import json
import os

import torch


def info() -> dict:
    import triton

    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}


def log(*a) -> None:
    print(*a, flush=True)


def bench(fn, warmup: int = 25, rep: int = 100) -> float:
    """Median milliseconds of ``fn()`` (events around each call; ``warmup``/``rep`` in ms)."""
    from triton.testing import do_bench

    return do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def bench_graph(fn, rep: int = 50) -> float:
    """Milliseconds of ``fn()`` replayed from a CUDA graph (no Python launch cost): ``do_bench_cudagraph``'s mean
    over its 10 replays of a graph of ``fn`` called back to back. Operands small enough stay in L2 from call to
    call (``bench_graph_cold`` keeps them out)."""
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=rep)


def l2_cold_copies(t: torch.Tensor, l2_bytes: int | None = None) -> list[torch.Tensor]:
    """``t`` and enough copies of it that together they pass twice the L2 cache (``l2_bytes``; default: the
    GPU's), for ``bench_graph_cold``."""
    if l2_bytes is None:
        l2_bytes = torch.cuda.get_device_properties(t.device).L2_cache_size
    n = max(2, -(-2 * l2_bytes // (t.numel() * t.element_size())))
    return [t] + [t.clone() for _ in range(n - 1)]


def bench_graph_cold(fn, operands: list[torch.Tensor], rep: int = 50) -> float:
    """``bench_graph`` of ``fn(op)``, op cycling through ``operands`` (``l2_cold_copies`` of a weight) from call to
    call, so each call reads its operand from memory, not from L2: a layer's weight in a model step, where every
    other layer's weights pass through L2 between two calls of the same layer. (``bench_graph`` times the same
    weight called back to back: a weight under L2's size, e.g. a Qwen3-1.7B layer's 8-48 MB against the H200's
    50 MB, is then read from L2.)"""
    it = itertools.cycle(operands)
    return bench_graph(lambda: fn(next(it)), rep)


def host_us(fn, calls: int, profile: bool = False, top: int = 12) -> tuple[float, list]:
    """Microseconds of host time per ``fn()``: ``calls`` calls queued behind a GPU kept busy (``torch.cuda._sleep``), so
    that no launch waits on it, wall time over calls; and (``profile``) the same calls under cProfile, its ``top``
    heaviest functions by own time as (function, own us, cumulative us) per call (cProfile inflates small calls)."""
    import cProfile
    import pstats
    import time
    from pathlib import Path

    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(4_000_000_000)  # seconds at any clock: longer than the calls' enqueue
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    rows = []
    if profile:
        torch.cuda._sleep(4_000_000_000)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        st = pstats.Stats(prof).stats
        rows = [(f"{Path(f).name}:{line}({name})", round(tt / calls * 1e6, 1), round(ct / calls * 1e6, 1))
                for (f, line, name), (_, _, tt, ct, _) in sorted(st.items(), key=lambda kv: -kv[1][2])[:top]]
    return us, rows


def kernel_rows(prof) -> list[tuple[str, int, float]]:
    """(name, launches, microseconds) of every GPU kernel and memcpy a ``torch.profiler`` run
    recorded, longest total first."""
    from torch.autograd import DeviceType

    return sorted(((e.key, e.count, e.device_time_total) for e in prof.key_averages()
                   if e.device_type == DeviceType.CUDA and e.device_time_total > 0), key=lambda r: -r[2])


def idle_gaps(kernels: list[tuple[float, float, str]], top: int = 12) -> dict:
    """Where the GPU waited within a profiled span: kernels as (start, end, name) in microseconds
    (overlaps allowed). The span from the first start to the last end, the time no kernel ran,
    and the ``top`` longest gaps with the kernels on either side (a host sync, or a stretch of
    launches the host cannot keep ahead of, shows here and nowhere in the kernel totals)."""
    gaps, busy_end, last = [], None, ""
    for start, end, name in sorted(kernels):
        if busy_end is not None and start > busy_end:
            gaps.append((start - busy_end, last, name))
        if busy_end is None or end > busy_end:
            busy_end, last = end, name
    span = busy_end - min(k[0] for k in kernels) if kernels else 0.0
    idle = sum(g[0] for g in gaps)
    return {"span_ms": round(span / 1e3, 3), "idle_ms": round(idle / 1e3, 3), "gaps": len(gaps),
            "gaps_over_50us_ms": round(sum(g[0] for g in gaps if g[0] > 50) / 1e3, 3),
            "top": [{"us": round(g, 1), "after": a[:70], "before": b[:70]} for g, a, b in sorted(gaps)[::-1][:top]]}


def profiled_kernels(prof) -> list[tuple[float, float, str]]:
    """(start, end, name) in microseconds of every GPU kernel and memcpy a ``torch.profiler`` run recorded."""
    from torch.autograd import DeviceType

    return [(e.time_range.start, e.time_range.end, e.name) for e in prof.events() if e.device_type == DeviceType.CUDA]


def kernel_times(fn) -> list[tuple[str, float]]:
    """(name, microseconds) of the GPU kernels (and memsets, copies) one call of ``fn`` runs, in launch order
    (``torch.profiler``, eager: each kernel's own time, not a graph's), after a call outside the profile
    (compilation, autotuning): which kernels cuBLAS picked for a shape, and which of a layer's kernels takes the
    time."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [(name, round(end - start, 2)) for start, end, name in sorted(profiled_kernels(prof))]


def kernel_names(fn) -> list[str]:
    """``kernel_times``'s names only."""
    return [name for name, _ in kernel_times(fn)]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative Frobenius error of ``a`` against the (float64) reference ``b``."""
    return float((a.double() - b.double()).norm() / b.double().norm())


def save(name: str, res: dict) -> None:
    """``res`` as ``$OUT/{name}.json``, whole or not at all (a temporary file renamed over it): a benchmark that saves
    as it goes leaves its last whole save when its call's time limit cuts it."""
    path = os.path.join(os.environ.get("OUT", "."), f"{name}.json")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1, default=str)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
