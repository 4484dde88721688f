"""The small harness every GPU benchmark shares: what ran where (``info``), timing (median of
``triton.testing.do_bench``, or of CUDA-graph replays), a flushed log line, and one JSON result
file under ``$OUT``. Benchmarks only measure; the bitwise contract is tests/gpu (marked gpu)."""

from __future__ import annotations

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
    """Median milliseconds of ``fn()`` replayed from a CUDA graph (no Python launch cost)."""
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=rep)


def kernel_rows(prof) -> list[tuple[str, int, float]]:
    """(name, launches, microseconds) of every GPU kernel and memcpy a ``torch.profiler`` run
    recorded, longest total first."""
    from torch.autograd import DeviceType

    return sorted(((e.key, e.count, e.device_time_total) for e in prof.key_averages()
                   if e.device_type == DeviceType.CUDA and e.device_time_total > 0), key=lambda r: -r[2])


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative Frobenius error of ``a`` against the (float64) reference ``b``."""
    return float((a.double() - b.double()).norm() / b.double().norm())


def save(name: str, res: dict) -> None:
    with open(os.path.join(os.environ.get("OUT", "."), f"{name}.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
