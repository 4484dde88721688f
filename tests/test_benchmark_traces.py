"""The trace summaries the GPU benchmarks bring back instead of traces (benchmarks/trace_steps.py,
benchmarks/vllm_cuda.py --engine-profile), on a synthetic torch-profiler trace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from trace_steps import totals  # noqa: E402
from vllm_cuda import decode_step_figures, per_step  # noqa: E402


def _trace(path: Path, steps: int) -> str:
    """One 8-token prefill step (a 'gemm' of 50 us, 'attn' of 20 us), then ``steps`` decode steps of two
    kernels ('gemm' 10 us, 'attn' 5 us) inside vLLM's GPU step annotation, 5 us apart."""
    ev, t = [], 0.0

    def step(name: str, kernels: list[tuple[str, float]]) -> None:
        nonlocal t
        start = t
        for k, d in kernels:
            ev.append({"ph": "X", "cat": "kernel", "name": k, "ts": t, "dur": d})
            t += d
        ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "ts": start, "dur": t - start})
        t += 5

    step("execute_context_1(8)_generation_0(0)", [("gemm", 50), ("attn", 20)])
    for _ in range(steps):
        step("execute_context_0(0)_generation_1(1)", [("gemm", 10), ("attn", 5)])
    path.write_text(json.dumps({"traceEvents": ev}))
    return str(path)


def test_totals_and_per_step_isolate_decode_steps(tmp_path):
    short, long = totals(_trace(tmp_path / "a.json", 0), top=0), totals(_trace(tmp_path / "b.json", 4), top=0)
    assert long["steps"] == {"execute_context_0(0)_generation_1(1)": {"n": 4, "us": 15.0},
                             "execute_context_1(8)_generation_0(0)": {"n": 1, "us": 70.0}}
    assert long["busy_us"] == 70 + 4 * 15 and long["span_us"] == 70 + 4 * 20
    d = per_step(long, short, 4)
    assert (d["busy_us"], d["span_us"], d["idle_us"], d["kernels"]) == (15.0, 20.0, 5.0, 2.0)
    assert d["top"] == [{"kernel": "gemm", "n": 1.0, "us": 10.0}, {"kernel": "attn", "n": 1.0, "us": 5.0}]
    assert d["step_spans"]["execute_context_0(0)_generation_1(1)"] == {"n": 4, "us": 15.0}


def test_idle_gaps_counts_time_no_kernel_covers():
    from harness import idle_gaps

    # a: 0-10, b overlaps it (5-20), a gap of 30 before c (50-60), a gap of 5 before d (65-70)
    r = idle_gaps([(50.0, 60.0, "c"), (0.0, 10.0, "a"), (5.0, 20.0, "b"), (65.0, 70.0, "d")])
    assert (r["span_ms"], r["idle_ms"], r["gaps"]) == (0.07, 0.035, 2)
    assert r["top"][0] == {"us": 30.0, "after": "b", "before": "c"}
    assert r["gaps_over_50us_ms"] == 0.0
    assert idle_gaps([])["gaps"] == 0


def test_step_medians_read_steps_between_the_marker_kernels():
    from trace_steps import STEP_MARKER, step_medians

    # 6 steps of 100 us: the marker (2 us), a model kernel (40 us), the token copy (3 us), then the host's gap (55 us)
    gpu = []
    for i in range(6):
        t = 100.0 * i
        gpu += [{"name": STEP_MARKER, "ts": t, "dur": 2.0}, {"name": "model", "ts": t + 2, "dur": 40.0},
                {"name": "Memcpy DtoH", "ts": t + 42, "dur": 3.0}]
    r = step_medians(gpu, skip=1)  # steps 1-5: four whole intervals
    assert r == {"n": 4, "step_us": 100.0, "busy_us": 45.0, "idle_us": 55.0, "longest_gap_us": 55.0,
                 "longest_gap_after": "Memcpy DtoH"}  # the host's wait: after the copy, before the next marker
    assert step_medians(gpu[:3]) == {"n": 0}


def test_host_gaps_name_the_hosts_untraced_stretches_a_step(tmp_path):
    from trace_steps import STEP_MARKER, host_gaps

    # 6 steps of 1,000 us on the host: the marker's launch (correlation i, 5 us), an op (100 us), an event record
    # (5 us), then 600 us of untraced Python before a slice (10 us), then 280 us before the next step's launch
    ev = []
    for i in range(6):
        t = 1000.0 * i
        ev += [{"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "ts": t, "dur": 5.0,
                "args": {"correlation": i}},
               {"ph": "X", "cat": "kernel", "name": STEP_MARKER, "ts": t + 50, "dur": 2.0, "args": {"correlation": i}},
               {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": t + 5, "dur": 100.0, "args": {}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventRecordWithFlags", "ts": t + 105, "dur": 5.0,
                "args": {}},
               {"ph": "X", "cat": "cpu_op", "name": "aten::slice", "ts": t + 710, "dur": 10.0, "args": {}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    r = host_gaps(str(path), skip=1)  # steps 1-5: four whole intervals
    assert r["steps"] == 4 and r["step_us"] == 1000.0
    assert r["gaps"] == [{"after": "cudaEventRecordWithFlags", "before": "aten::slice", "us_per_step": 600.0,
                          "median_us": 600.0},
                         {"after": "aten::slice", "before": "next step", "us_per_step": 280.0, "median_us": 280.0}]


def test_decode_step_figures_take_each_length_apart():
    """Session 48's 1.7B rlk runs at 64 sequences (H100): one 1-token run stalled, so that pair's difference was
    negative (-1.035 ms) and a minimum over pairs reported it. Each length's median and fastest run apart: the
    same stall moves neither figure below the others' steps."""
    steps = 127
    short = [0.030, 0.031, 0.600, 0.030, 0.032]  # the third stalled
    long = [short[0] + steps * 3.0e-3, short[1] + steps * 3.2e-3, 0.030 + steps * 3.1e-3,
            short[3] + steps * 3.3e-3, short[4] + steps * 2.9e-3]
    fig = decode_step_figures(short, long, steps)
    assert fig["pairs_ms"][2] < 0  # the pair's own difference, kept for the record
    assert 2.9 <= fig["min_ms"] <= 3.3 and 2.9 <= fig["median_ms"] <= 3.3
    assert fig["median_ms"] == round((sorted(long)[2] - sorted(short)[2]) / steps * 1e3, 3)
