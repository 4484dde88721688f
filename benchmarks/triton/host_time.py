"""The host's time to queue one op (Python, Triton's launch path, the driver) against torch's own op's, per call:
what an eager forward or backward costs the host before the GPU's work starts, the cost that decides a training
step at a small micro-batch (a step whose kernels are shorter than their launches idles the GPU) and vLLM's steps
that run outside CUDA graphs. Each op is called ``--calls`` times behind ``torch.cuda._sleep`` (the GPU busy, so no
launch waits on it), the wall time divided by the calls; then the same calls under cProfile, its heaviest functions
by own time (``--profile``), and (``--breakdown``) the time in each stage of Triton's launch path, timed directly.
Triton's floor: a one-argument kernel through ``kernel[grid](...)``. Writes ``$OUT/host_time.json``.

    python benchmarks/triton/host_time.py [--calls 200] [--profile] [--breakdown]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import host_us, info, log, save  # noqa: E402

from rlk_models.ops import get_backend  # noqa: E402
from rlk_models.ops.checks import trusted_values  # noqa: E402


@triton.jit
def _touch(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) + 1)


@triton.jit
def _touch_desc(d):
    d.store([0, 0], d.load([0, 0]) + 1)


STAGES = ("binder", "cache key", "globals check", "launcher")


def _timed_run(acc: dict):
    """``JITFunction.run`` of Triton 3.6 for a compiled kernel (the same steps, in order), its stages' host time added
    into ``acc``: the binder (every argument's specialization), the cache key and lookup, the check of the kernel's
    globals, the launcher (its C call with each TMA descriptor encoded); and each launch's arguments in
    ``acc["launches"]``, to replay through the compiled kernel alone (no binder, key or check)."""
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import compute_cache_key

    def run(self, *args, grid, warmup, **kwargs):
        t0 = time.perf_counter()
        kwargs["debug"] = kwargs.get("debug", self.debug) or knobs.runtime.debug
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        device = driver.active.get_current_device()
        stream = driver.active.get_current_stream(device)
        kernel_cache, kernel_key_cache, target, backend, binder = self.device_caches[device]
        bound_args, specialization, options = binder(*args, **kwargs)
        t1 = time.perf_counter()
        kernel = kernel_cache.get(compute_cache_key(kernel_key_cache, specialization, options))
        t2 = time.perf_counter()
        if kernel is None or warmup:
            raise RuntimeError("host_time: a kernel compiles during the timed calls (warm up first)")
        for (name, _), (val, globals_dict) in self.used_global_vals.items():
            if globals_dict.get(name) != val:
                raise RuntimeError(f"global {name} changed")
        t3 = time.perf_counter()
        grid = grid(bound_args) if callable(grid) else grid
        g = (tuple(grid) + (1, 1))[:3]
        kernel.run(*g, stream, kernel.function, kernel.packed_metadata, None, None, None, *bound_args.values())
        t4 = time.perf_counter()
        for stage, dt in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            acc[stage] = acc.get(stage, 0.0) + dt
        acc["launches"].append((kernel, g, tuple(bound_args.values())))
        return kernel
    return run


def breakdown(fn, calls: int) -> dict:
    """Per call of ``fn``, host microseconds: in all, in Triton's run by stage (``_timed_run``), the rest (ours: the
    op's Python, torch's allocations and autograd), and the same launches replayed through each compiled kernel's
    launcher alone, which no launch can go below without a launcher of its own."""
    from triton.runtime.jit import JITFunction

    acc = {"launches": []}
    real = JITFunction.run
    JITFunction.run = _timed_run(acc)
    try:
        fn()
        torch.cuda.synchronize()
        acc.update({"launches": []} | dict.fromkeys(STAGES, 0.0))
        torch.cuda._sleep(4_000_000_000)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        total = time.perf_counter() - t0
        torch.cuda.synchronize()
    finally:
        JITFunction.run = real
    launches = acc["launches"][: len(acc["launches"]) // calls]  # one call's
    torch.cuda._sleep(4_000_000_000)
    t0 = time.perf_counter()
    for _ in range(calls):
        for kernel, g, args in launches:
            kernel.run(*g, torch.cuda.current_stream().cuda_stream, kernel.function, kernel.packed_metadata, None,
                       None, None, *args)
    replay = time.perf_counter() - t0
    torch.cuda.synchronize()
    out = {"launches": len(launches), "total_us": total / calls * 1e6}
    out |= {f"triton {k}_us": acc[k] / calls * 1e6 for k in STAGES}
    out["ours and torch_us"] = out["total_us"] - sum(out[f"triton {k}_us"] for k in STAGES)
    out["launcher replay_us"] = replay / calls * 1e6
    return {k: round(v, 1) for k, v in out.items()}


def cases(dev: torch.device) -> dict:
    """name -> (ours, torch's): 8B-shaped ops at decode- and prefill-sized rows."""
    ops = get_backend("triton")
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return (torch.randn(*shape, device=dev, generator=g) * 0.02).bfloat16()

    w_qkv, w_o, w_down = rnd(6144, 4096), rnd(4096, 4096), rnd(4096, 12288)
    norm_w = torch.ones(4096, device=dev, dtype=torch.bfloat16)
    out = {}
    for m in (16, 1024):
        x, xd, res = rnd(m, 4096), rnd(m, 12288), rnd(m, 4096)
        out[f"qkv M={m}"] = (lambda x=x: ops.linear(x, w_qkv), lambda x=x: F.linear(x, w_qkv))
        out[f"o M={m}"] = (lambda x=x: ops.linear(x, w_o, row_parallel=True), lambda x=x: F.linear(x, w_o))
        out[f"down M={m}"] = (lambda x=xd: ops.linear(x, w_down, row_parallel=True), lambda x=xd: F.linear(x, w_down))
        out[f"rms_norm M={m}"] = (lambda x=x: ops.rms_norm(x, norm_w, 1e-6),
                                  lambda x=x: F.rms_norm(x, (4096,), norm_w, 1e-6))
        out[f"add_rms_norm M={m}"] = (lambda x=x, r=res: ops.add_rms_norm(x, r, norm_w, 1e-6),
                                      lambda x=x, r=res: F.rms_norm(x + r, (4096,), norm_w, 1e-6))
    xt = rnd(16, 4096).requires_grad_()
    wt = w_qkv.clone().requires_grad_()
    gy = rnd(16, 6144)
    out["qkv fwd+bwd M=16"] = (lambda: torch.autograd.grad(ops.linear(xt, wt), (xt, wt), gy),
                               lambda: torch.autograd.grad(F.linear(xt, wt), (xt, wt), gy))
    one = torch.zeros(1, device=dev)
    out["floor: a 1-argument kernel"] = (lambda: _touch[(1,)](one), lambda: one.add_(1))
    runner = _touch[(1,)](one)[(1, 1, 1)]  # the compiled kernel's own runner: no binder, no cache lookup
    out["floor: its compiled runner"] = (lambda: runner(one), lambda: one.add_(1))
    from triton.tools.tensor_descriptor import TensorDescriptor

    tile = torch.zeros(16, 16, device=dev)
    out["floor: a 1-descriptor kernel"] = (lambda: _touch_desc[(1,)](TensorDescriptor.from_tensor(tile, [16, 16])),
                                          lambda: tile.add_(1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--profile", action="store_true", help="ours under cProfile too (inflates small calls)")
    ap.add_argument("--breakdown", action="store_true", help="ours by stage of Triton's launch path (breakdown)")
    ap.add_argument("--ops", default="", help="comma-separated: only the cases whose name starts with one of these")
    args = ap.parse_args()
    dev = torch.device("cuda")
    res = {"info": info(), "calls": args.calls, "ops": {}}
    with trusted_values():  # value checks (a host read) are their own question: #17 asks about launches
        wanted = [w for w in args.ops.split(",") if w]
        for name, (ours, theirs) in cases(dev).items():
            if wanted and not any(name.startswith(w) for w in wanted):
                continue
            o_us, top = host_us(ours, args.calls, profile=args.profile)
            t_us, _ = host_us(theirs, args.calls)
            res["ops"][name] = {"ours_us": round(o_us, 1), "torch_us": round(t_us, 1), "ours_top_own_us": top}
            log(f"{name:28} host per call: ours {o_us:7.1f} us  torch {t_us:7.1f} us  ({o_us / t_us:5.2f}x)")
            for row in top[:6]:
                log(f"{'':30}{row[1]:7.1f} own {row[2]:7.1f} cum  {row[0]}")
            if args.breakdown and not name.startswith("floor"):
                b = res["ops"][name]["breakdown"] = breakdown(ours, args.calls)
                log(f"{'':30}" + ", ".join(f"{k} {v}" for k, v in b.items()))
            save("host_time", res)


if __name__ == "__main__":
    main()
