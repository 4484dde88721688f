"""Where a decode step's time goes, from a timeline that ``benchmarks/vllm_cuda.py --profile``
wrote (``trace_<engine>_b1.json.gz``): the interval between consecutive CUDA-graph replays (one
decode step), the GPU kernels' busy time in it, and the host functions of one step that take
longer than ``--min-us`` (inclusive time; under the profiler's stack tracing host code runs
several times slower than without it, so compare engines, not absolute numbers).

    python benchmarks/trace_steps.py trace_stock_b1.json.gz trace_rlk_b1.json.gz
    python benchmarks/trace_steps.py --host trace_rlk_b256_light.json.gz   # the host's untraced stretches a step

``totals(path)`` sums any trace into a few numbers (``vllm_cuda.py --engine-profile`` and ``--profile``'s
``light_trace`` keep those), ``step_medians`` among them: the median step, GPU busy and idle time between vLLM's
once-a-step kernel, and where the GPU waits longest (session 39's per-batch table in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import gzip
import json

SKIP = ("site-packages/torch/", "threading", "queue.py", "<built-in")


def load(path: str) -> list[dict]:
    with gzip.open(path) if path.endswith(".gz") else open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def totals(path: str, top: int = 12) -> dict:
    """A trace as a few numbers: its span from the first to the last kernel, the kernels' busy
    time in it (so the GPU's idle time), kernel launches and CUDA-graph replays, and the ``top``
    kernels by total time (0: all) -- small enough to bring back instead of the trace."""
    ev = load(path)
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    if not kernels:
        return {"kernels": 0}
    a, b = min(e["ts"] for e in kernels), max(e["ts"] + e["dur"] for e in kernels)
    by: dict[str, list[float]] = {}
    for e in kernels:
        by.setdefault(e["name"], []).append(e["dur"])
    rows = sorted(by.items(), key=lambda kv: -sum(kv[1]))
    busy = sum(e["dur"] for e in kernels)
    return {"span_us": round(b - a), "busy_us": round(busy), "idle_us": round(b - a - busy),
            "kernels": len(kernels), "graph_replays": sum(1 for e in ev if e.get("cat") == "cuda_runtime"
                                                        and "GraphLaunch" in e["name"]),
            "steps": step_spans(ev),
            "step_medians": step_medians(kernels + [e for e in ev if e.get("cat") in ("gpu_memcpy", "gpu_memset")]),
            "top": [{"kernel": k[:100], "n": len(d), "us": round(sum(d))} for k, d in (rows[:top] if top else rows)]}


def step_spans(ev: list[dict], top: int = 8) -> dict:
    """vLLM's own step annotations on the GPU timeline (``execute_context_<requests>(<tokens>)_generation_
    <requests>(<tokens>)``, one per engine step, the prefill/decode mix in its name): per name, the
    steps and their mean GPU span in microseconds, the most frequent first -- a decode step's GPU
    time read straight from the trace, whatever else the traced run held."""
    by: dict[str, list[float]] = {}
    for e in ev:
        if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("execute_context"):
            by.setdefault(e["name"], []).append(e["dur"])
    rows = sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:top]
    return {k: {"n": len(d), "us": round(sum(d) / len(d), 1)} for k, d in rows}


STEP_MARKER = "_compute_slot_mappings_kernel"  # a kernel vLLM 0.26 runs once a step (its inputs), in every engine


def step_medians(gpu: list[dict], marker: str = STEP_MARKER, skip: int = 2) -> dict:
    """Engine steps read from GPU events alone (kernels, copies), between consecutive ``marker`` kernels: the
    median step, the GPU's busy and idle time in it (``harness.idle_gaps``: overlapping events count once), and
    the median longest idle gap a step with the event it most often follows (where the GPU waits on the host; the
    wait before the next step's marker counts). The first ``skip`` steps (a traced run's prefill) are left out.
    Works on a trace without step annotations (torch.profiler in the benchmark's process)."""
    import statistics

    from harness import idle_gaps

    gpu = sorted(gpu, key=lambda e: e["ts"])
    marks = [e["ts"] for e in gpu if e["name"] == marker][skip:]
    steps, idle, longest, after = [], [], [], {}
    i = 0
    for a, b in zip(marks, marks[1:]):
        while i < len(gpu) and gpu[i]["ts"] < a:
            i += 1
        inside = []
        while i < len(gpu) and gpu[i]["ts"] < b:
            inside.append((gpu[i]["ts"], gpu[i]["ts"] + gpu[i]["dur"], gpu[i]["name"]))
            i += 1
        gaps = idle_gaps(inside + [(b, b, marker)], top=1)
        steps.append(b - a)
        idle.append(gaps["idle_ms"] * 1e3)
        top = gaps["top"][0] if gaps["top"] else {"us": 0.0, "after": ""}
        longest.append(top["us"])
        after[top["after"][:60]] = after.get(top["after"][:60], 0) + 1
    if not steps:
        return {"n": 0}
    med = statistics.median
    return {"n": len(steps), "step_us": round(med(steps), 1), "busy_us": round(med(steps) - med(idle), 1),
            "idle_us": round(med(idle), 1), "longest_gap_us": round(med(longest), 1),
            "longest_gap_after": max(after, key=after.get)}


def host_gaps(path: str, marker: str = STEP_MARKER, skip: int = 2, min_us: float = 30, top: int = 8) -> dict:
    """Where a step's host time goes in a trace with host events but no Python stacks (``--profile``'s
    ``trace_<engine>_b<B>_light``): steps between the host's launches of ``marker`` (vLLM's once-a-step kernel;
    ``skip`` left out, as in ``step_medians``), and per step the host's stretches of untraced Python -- the gaps
    of over ``min_us`` between consecutive recorded host events (torch ops, CUDA runtime and driver calls) --
    named by the events around them, the ``top`` largest by their time a step, with their median. Session 40: at
    256 sequences the stretch after ``cudaEventRecordWithFlags`` (the step enqueued) up to the next step's first
    op is the engine's own Python (output processing and scheduling, 3.0-3.5 ms in both engines) and holds
    the whole difference between rlk's and stock's profiled steps."""
    import statistics

    from harness import idle_gaps

    ev = load(path)
    launch = {e["args"].get("correlation"): e["ts"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    marks = sorted(launch[e["args"]["correlation"]] for e in ev
                   if e.get("cat") == "kernel" and e["name"] == marker and e["args"].get("correlation") in launch)
    marks = marks[skip:]
    host = sorted((e for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")), key=lambda e: e["ts"])
    gaps: dict[tuple[str, str], list[float]] = {}
    i = 0
    for a, b in zip(marks, marks[1:]):
        while i < len(host) and host[i]["ts"] < a:
            i += 1
        inside = [(a, a, "step")]  # the stretch after the step's start and the one before the next step count too
        while i < len(host) and host[i]["ts"] < b:
            inside.append((host[i]["ts"], host[i]["ts"] + host[i]["dur"], host[i]["name"]))
            i += 1
        # the host's idle stretches, overlapping events counted once: the GPU gap walk of step_medians
        for g in idle_gaps(inside + [(b, b, "next step")], top=len(inside) + 1)["top"]:
            if g["us"] > min_us:
                gaps.setdefault((g["after"][:50], g["before"][:50]), []).append(g["us"])
    n = max(len(marks) - 1, 1)
    rows = sorted(gaps.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {"steps": len(marks) - 1,
            "step_us": round(statistics.median(b - a for a, b in zip(marks, marks[1:])), 1) if len(marks) > 1 else 0,
            "gaps": [{"after": k[0], "before": k[1], "us_per_step": round(sum(v) / n, 1),
                      "median_us": round(statistics.median(v), 1)} for k, v in rows]}


def summarize(path: str, min_us: float) -> None:
    ev = load(path)
    launches = sorted((e for e in ev if e.get("cat") == "cuda_runtime" and "GraphLaunch" in e["name"]),
                      key=lambda e: e["ts"])
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    print(f"== {path}: {len(launches)} graph replays; steps (medians): "
          f"{step_medians([e for e in ev if e.get('cat') in ('kernel', 'gpu_memcpy', 'gpu_memset')])}")
    for a, b in zip(launches, launches[1:]):
        busy = sum(e["dur"] for e in kernels if a["ts"] <= e["ts"] < b["ts"])
        print(f"   step {b['ts'] - a['ts']:8.0f} us between replays, kernels busy {busy:7.0f} us")
    if len(launches) > 2:  # the decode steps as a whole (an rlk step replays two graphs: the model, the head)
        a, b = launches[1]["ts"], launches[-1]["ts"]
        busy = sum(e["dur"] for e in kernels if a <= e["ts"] < b)
        print(f"   replays 2..{len(launches)}: {b - a:.0f} us, kernels busy {busy:.0f} us ({busy / (b - a):.0%}), "
              f"GPU idle {b - a - busy:.0f} us")
    if len(launches) < 3:
        return
    a, b = launches[-3]["ts"], launches[-2]["ts"]
    print(f"   host functions of the step ending at the last replay but one (> {min_us:.0f} us):")
    for e in sorted((e for e in ev if e.get("cat") == "python_function" and a <= e["ts"] < b and e["dur"] > min_us
                     and not any(s in e["name"] for s in SKIP)), key=lambda e: e["ts"]):
        print(f"   {e['ts'] - a:9.0f} {e['dur']:7.0f}  {e['name'][:140]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--min-us", type=float, default=150)
    ap.add_argument("--host", action="store_true",
                    help="the host's untraced stretches a step (``host_gaps``; a trace without Python stacks)")
    a = ap.parse_args()
    for p in a.traces:
        if a.host:
            print(p, json.dumps(host_gaps(p), indent=1))
        else:
            summarize(p, a.min_us)


if __name__ == "__main__":
    main()
