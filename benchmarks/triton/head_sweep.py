"""H200 benchmark of the fused log-prob head (Triton), bf16, K=4096, V=151,936: accuracy vs
float64, forward time vs the cuBLAS lm_head matmul alone, forward+backward time vs torch (matmul
+ log_softmax + gather), peak extra memory vs fp32 [T, V] logits, and a profile of small-M
forwards, and the host time per call of the eager forward against ``HeadGraphs`` (the vLLM
class's graphed head) at decode sizes. Measures only: the head's bitwise contract is tests/gpu. The stats-kernel tile
candidates are timed and their bits recorded against the default (tuning data: which unused
configs would keep the contract), as ``stats_configs_same_bits``.

    python benchmarks/triton/head_sweep.py
    python benchmarks/triton/head_sweep.py --stats-kernels [T,...]  # only the Triton against the Gluon stats
                                                                   # kernel (T rows; default 16384)
    python benchmarks/triton/head_sweep.py --graph-split [T,...]    # the graphed forward's kernels and idle time
                                                                   # at decode sizes against the matmul's (1,16,128)
    python benchmarks/triton/head_sweep.py --backward-split [T,...] # the eager forward + backward's kernels against
                                                                   # torch's, its host time, and dh's launch
                                                                   # candidates (128,256,512)
    python benchmarks/triton/head_sweep.py --plot-backward PNG LABEL=JSON ...  # those runs' fwd+bwd / torch (no GPU)
"""

from __future__ import annotations

import importlib
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import bench as do_bench_ms  # noqa: E402
from harness import bench_graph, idle_gaps, info, kernel_rows, log, profiled_kernels, save  # noqa: E402

head = importlib.import_module("rlk_models.ops.triton.logprob_head")  # the package re-exports a function of that name
head_sm90 = importlib.import_module("rlk_models.ops.triton.head_sm90")
Launch = importlib.import_module("rlk_models.ops.triton.matmul").Launch

K, V = 4096, 151936


def main() -> None:
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    res = {"info": info()}
    log(res["info"])
    h = torch.randn(8192, K, device=dev, generator=g).bfloat16()
    w = (torch.randn(V, K, device=dev, generator=g) * 0.02).bfloat16()
    tgt = torch.randint(0, V, (8192,), device=dev, generator=g)
    full = head.logprob_head_forward(h, w, tgt, V)
    hg, wg = h[:2048].clone().requires_grad_(), w.clone().requires_grad_()
    gl = torch.randn(2048, device=dev, generator=g)
    h64, w64 = h[:64].double().requires_grad_(), w.double().requires_grad_()
    ref_lp = (h64 @ w64.T).log_softmax(-1).gather(1, tgt[:64, None])[:, 0]
    ref_dh = torch.autograd.grad(ref_lp, h64, gl[:64].double())[0]
    got_dh = torch.autograd.grad(head.logprob_head(hg[:64], wg, tgt[:64], V)[0], hg, gl[:64])[0][:64]
    res["dh_rel_err_vs_fp64"] = float((got_dh.double() - ref_dh).norm() / ref_dh.norm())
    del h64, w64, ref_dh
    want = (h[:64].double() @ w.double().T).log_softmax(-1).gather(1, tgt[:64, None])[:, 0]
    res["max_abs_err_vs_fp64"] = float((full[:64].double() - want).abs().max())
    for m in (1, 16, 128, 1024, 8192):
        hm, tm = h[:m], tgt[:m]
        t_mm = do_bench_ms(lambda: F.linear(hm, w), warmup=25, rep=100)
        best = None
        default = head.STATS_CONFIG
        for bm, warps in ((16, 4), (64, 4), (128, 8)):
            head.STATS_CONFIG = {1 << 62: (bm, warps)}
            try:
                t = do_bench_ms(lambda: head._launch_stats(hm, w, tm, False, False, 600), warmup=10, rep=50)
                same = torch.equal(head.logprob_head_forward(hm, w, tm, V), full[:m])
            except triton.runtime.errors.OutOfResources:
                continue
            finally:
                head.STATS_CONFIG = default
            res.setdefault("stats_configs_same_bits", {})[f"M{m} bm={bm} warps={warps}"] = same
            best = min(best or (t, bm, warps), (t, bm, warps))
        t_full = do_bench_ms(lambda: head.logprob_head_forward(hm, w, tm, V), warmup=10, rep=50)
        if m >= 1024:  # the stats kernel's loads (TMA or pointers), and with the training forward's kept probabilities
            #            (always pointer loads: _launch_stats takes TMA loads only when the kernel keeps nothing)
            default_rows, forms = head.STATS_TMA_ROWS, {}
            for loads, rows in (("tma", 1), ("pointer", 1 << 62)):
                head.STATS_TMA_ROWS = rows
                try:
                    forms[loads] = head._launch_stats(hm, w, tm, False, False, 600)
                    res.setdefault("stats_kernel_us", {})[f"M{m} {loads}"] = do_bench_ms(
                        lambda: head._launch_stats(hm, w, tm, False, False, 600), warmup=5, rep=20) * 1e3
                finally:
                    head.STATS_TMA_ROWS = default_rows
            res["stats_kernel_us"][f"M{m} keep_probs"] = do_bench_ms(
                lambda: head._launch_stats(hm, w, tm, False, False, 600, keep_probs=True), warmup=5, rep=20) * 1e3
            res.setdefault("stats_tma_same_bits_as_pointer", {})[f"M{m}"] = all(
                torch.equal(a, b) for a, b in zip(forms["tma"][:4], forms["pointer"][:4]))
            del forms
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        head.logprob_head_forward(hm, w, tm, V)
        extra = torch.cuda.max_memory_allocated() - base
        fb = {}
        if m == 1024:  # where the backward's time goes: its three matmul shapes per vocab chunk
            c = head.bwd_chunk(m, V)
            fb["bwd_chunk"] = c
            dl16 = torch.randn(m, c, device=dev, generator=g).bfloat16()
            fb["bwd_parts_us"] = {
                "logits_chunk": do_bench_ms(lambda: head.mm(hm, w[:c], out_dtype=torch.float32), rep=20) * 1e3,
                "dh_chunk": do_bench_ms(lambda: head.mm(dl16, w[:c], b_kn=True, out_dtype=torch.float32), rep=20) * 1e3,
                "dw_chunk": do_bench_ms(lambda: head.mm(dl16, hm, a_km=True, b_kn=True), rep=20) * 1e3,
                "dw_chunk_cublas": do_bench_ms(lambda: dl16.t() @ hm, rep=20) * 1e3,
                "dh_chunk_cublas": do_bench_ms(lambda: dl16 @ w[:c], rep=20) * 1e3}
        if m >= 128:
            hmg = hm.clone().requires_grad_()
            gm = torch.randn(m, device=dev, generator=g)

            def ours(save_probs=True):
                return torch.autograd.grad(head.logprob_head(hmg, wg, tm, V, save_probs=save_probs)[0], [hmg, wg], gm)

            def recompute():
                return ours(save_probs=False)

            def torch_ref():
                lp = F.linear(hmg, wg).float().log_softmax(-1).gather(1, tm[:, None])[:, 0]
                return torch.autograd.grad(lp, [hmg, wg], gm)

            fb["fwd_bwd_ours_us"] = do_bench_ms(ours, warmup=3, rep=20) * 1e3
            fb["fwd_bwd_torch_us"] = do_bench_ms(torch_ref, warmup=3, rep=20) * 1e3
            fb["fwd_bwd_recompute_us"] = do_bench_ms(recompute, warmup=3, rep=20) * 1e3
            fb["ratio_fwd_bwd_vs_torch"] = fb["fwd_bwd_ours_us"] / fb["fwd_bwd_torch_us"]
            fb["ratio_fwd_bwd_recompute_vs_torch"] = fb["fwd_bwd_recompute_us"] / fb["fwd_bwd_torch_us"]
            if m == 8192:  # the recompute backward's dlogits tiles (deterministic per tile, any tile allowed)
                default_dl, fb["dlogits_configs_us"] = head.DLOGITS_CONFIG, {}
                for cfg in head.DLOGITS_CANDIDATES:
                    head.DLOGITS_CONFIG = cfg
                    try:
                        a, b = recompute(), recompute()
                        fb["dlogits_configs_us"][str(cfg)] = {
                            "fwd_bwd_us": do_bench_ms(recompute, warmup=3, rep=20) * 1e3,
                            "run_to_run": all(torch.equal(x, y) for x, y in zip(a, b))}
                        del a, b
                    except triton.runtime.errors.OutOfResources:
                        fb["dlogits_configs_us"][str(cfg)] = "out of resources"
                    finally:
                        head.DLOGITS_CONFIG = default_dl
            for name, fn in (("", ours), ("_recompute", recompute)):
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                grads = fn()
                fb[f"fwd_bwd{name}_extra_over_fp32_logits"] = (
                    torch.cuda.max_memory_allocated() - base - sum(x.numel() * x.element_size() for x in grads)
                ) / (m * V * 4)
                del grads
            del hmg
        res[f"M{m}"] = {**fb, "lm_head_matmul_us": t_mm * 1e3, "stats_kernel_best_us": best[0] * 1e3,
                        "best_block_m_warps": best[1:], "forward_default_us": t_full * 1e3,
                        "ratio_kernel_best": best[0] / t_mm, "ratio_forward_default": t_full / t_mm,
                        "extra_bytes": extra, "extra_over_fp32_logits": extra / (m * V * 4)}
        print(f"M={m:5}: lm_head matmul {t_mm * 1e3:8.1f} us | stats kernel best {best[0] * 1e3:8.1f} us "
              f"({best[0] / t_mm:.2f}x, bm,warps={best[1:]}) | forward default {t_full * 1e3:8.1f} us "
              f"({t_full / t_mm:.2f}x) | extra mem {extra / 2**20:.1f} MiB = {extra / (m * V * 4):.4f} of fp32 logits"
              f" | {fb}",
              flush=True)
    from torch.profiler import ProfilerActivity, profile

    for m in (1, 1024):
        hm, tm = h[:m], tgt[:m]
        head.logprob_head_forward(hm, w, tm, V)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                head.logprob_head_forward(hm, w, tm, V)
            torch.cuda.synchronize()
        print(f"profile of 5 forwards at M={m}:\n" + prof.key_averages().table(sort_by="cuda_time_total", row_limit=12),
              flush=True)
    res["host_us"] = host_time(h, w)
    print({k: v for k, v in res.items() if not k.startswith("M")}, flush=True)
    save("head_sweep", res)


@contextmanager
def settings(module, values: dict):
    """``module``'s attributes set to ``values`` inside the block, and restored after it (also on an exception)."""
    before = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(module, name, value)


def stats_kernel_forms(head, head_sm90):
    """(kernel, config) of the Triton statistics kernel (config None) and of every Gluon form
    (``head_sm90.STATS_SM90_CANDIDATES``), with ``STATS_KERNEL`` and ``STATS_SM90_CONFIG`` set so that
    ``_launch_stats`` runs that form in the loop's body, and restored after it. The modules are passed in: a
    probe run under another revision's package (``head_epilogue_probe.py``) times that package's."""
    default_config = head_sm90.STATS_SM90_CONFIG
    for kernel, config in [("triton", None)] + [("sm90", c) for c in head_sm90.STATS_SM90_CANDIDATES]:
        with settings(head, {"STATS_KERNEL": kernel}), settings(head_sm90,
                                                                {"STATS_SM90_CONFIG": config or default_config}):
            yield kernel, config


def stats_kernels(ts: tuple[int, ...] = (16384,)) -> dict:
    """The statistics kernel, Triton against every Gluon form (``head_sm90.STATS_SM90_CANDIDATES``), at T rows
    (default: the training step's) and the 8B and 1.7B heads (K = 4096, 2048), probabilities kept (training) or
    not (the forward-only log-prob pass, vLLM's): ms, the ratio to the Triton kernel and to the cuBLAS lm_head
    matmul, and whether every output is bitwise the Triton kernel's."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    res = {"info": info()}
    n_stats = triton.cdiv(V, head.VOCAB_TILE)
    for t, k in ((t, k) for t in ts for k in (4096, 2048)):
        h = torch.randn(t, k, device=dev, generator=g).bfloat16()
        w = (torch.randn(V, k, device=dev, generator=g) * 0.02).bfloat16()
        tgt = torch.randint(0, V, (t,), device=dev, generator=g)
        row = {"cublas_ms": do_bench_ms(lambda: F.linear(h, w), warmup=25, rep=100)}
        for keep in (True, False):
            out, ms = {}, {}
            for kernel, config in stats_kernel_forms(head, head_sm90):
                name = kernel if config is None else f"sm90 {config}"
                try:
                    out[name] = head._launch_stats(h, w, tgt, False, False, n_stats, keep)
                    ms[name] = do_bench_ms(lambda: head._launch_stats(h, w, tgt, False, False, n_stats, keep),
                                           warmup=10, rep=50)
                except Exception as exc:  # noqa: BLE001 -- a candidate that fails to build or run is reported
                    ms[name] = f"{type(exc).__name__}: {exc}"[:300]
            row[f"keep_probs={keep}"] = {
                name: x if isinstance(x, str) else {
                    "ms": x, "vs_triton": x / ms["triton"], "vs_cublas": x / row["cublas_ms"],
                    "bitwise": all((a is None and b is None) or torch.equal(a, b)
                                   for a, b in zip(out[name], out["triton"]))}
                for name, x in ms.items()}
            del out
        res[f"T{t} K{k}"] = row
        log(f"T={t} K={k}: {row}")
    save("head_stats_kernels", res)
    return res


def profiled(run, n: int, per: str) -> dict:
    """``run()`` called ``n`` times under ``torch.profiler``, per ``per`` (a replay, a call): every GPU kernel's
    launches and microseconds, their sum (busy), and the span from the first kernel's start to the last's end with
    the GPU's idle time in it (``harness.idle_gaps``)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            run()
        torch.cuda.synchronize()
    rows = [(name[:90], c // n if c % n == 0 else round(c / n, 2), round(us / n, 2))
            for name, c, us in kernel_rows(prof)]
    gaps = idle_gaps(profiled_kernels(prof))
    return {f"kernels_us_per_{per}": rows, "busy_us": round(sum(r[2] for r in rows), 2),
            f"span_us_per_{per}": round(gaps["span_ms"] * 1e3 / n, 2),
            f"idle_us_per_{per}": round(gaps["idle_ms"] * 1e3 / n, 2)}


# --graph-split's candidates up to 64 rows, where the Triton kernel's 64-row tiles hold 40 KB a K slot: 2 slots
# (two programs an SM; sessions 36-37: slower, 355-366 against 321-332 us), 3 (the default to session 37), 5 (one
# program with more of W in flight; the default's 4 since session 37), TMA loads of h and W, and the Gluon grid form
# (TMA, 128-row tiles)
GRAPH_SPLIT_CANDIDATES = {
    "forward_2slots": {"STATS_STAGES": {64: 2}},
    "forward_3slots": {"STATS_STAGES": {64: 3}},
    "forward_5slots": {"STATS_STAGES": {64: 5}},
    "forward_tma": {"STATS_TMA_ROWS": 1, "STATS_KERNEL": "triton"},
    "forward_sm90": {"STATS_TMA_ROWS": 1, "STATS_KERNEL": "sm90"},
}


def graph_split(ts: tuple[int, ...] = (1, 16, 128), replays: int = 20) -> dict:
    """Where the graphed forward's time goes at decode sizes (#17: 1.12-1.20x the cuBLAS lm_head matmul at 1-128
    rows, session 35): ``logprob_head_forward`` and ``F.linear`` each captured in a CUDA graph and replayed under
    ``torch.profiler``: per replay, every kernel's microseconds and the GPU's idle time between them (the graph's
    launch gaps), against the matmul's kernels. Up to 64 rows also each of ``GRAPH_SPLIT_CANDIDATES``, its bits
    checked against the default's (one that does not build is logged and skipped)."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    w = (torch.randn(V, K, device=dev, generator=g) * 0.02).bfloat16()
    res = {"info": info()}
    for t in ts:
        h = torch.randn(t, K, device=dev, generator=g).bfloat16()
        tgt = torch.randint(0, V, (t,), device=dev, generator=g)
        want = head.logprob_head_forward(h, w, tgt, V)
        forward = lambda: head.logprob_head_forward(h, w, tgt, V)  # noqa: E731
        runs = [("forward", forward, {}), ("cublas", lambda: F.linear(h, w), {})]
        if t <= 64:  # the stats kernel's candidates at decode sizes (module settings; none changes the bits)
            runs += [(name, forward, attrs) for name, attrs in GRAPH_SPLIT_CANDIDATES.items()]
        for name, fn, attrs in runs:
            with settings(head, attrs):
                try:
                    fn()
                except Exception as err:  # a candidate that does not build (shared memory): said, and the next one
                    log(f"T={t} {name}: {type(err).__name__}: {str(err)[:200]}")
                    res[f"T{t} {name}"] = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
                    continue
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    fn()
                for _ in range(3):
                    graph.replay()
                torch.cuda.synchronize()
                r = res[f"T{t} {name}"] = profiled(graph.replay, replays, "replay")
                if name.startswith("forward"):  # slots and loads never change the bits: checked
                    r["bits_same"] = torch.equal(fn(), want)
            log(f"T={t} {name}: busy {r['busy_us']} us, idle {r['idle_us_per_replay']} us a replay; "
                f"{r['kernels_us_per_replay']}")
    save("head_graph_split", res)
    return res


# --backward-split's launches of the probabilities backward's dh = dl @ W (M = T rows, N = K = 4096, over the
# 151,936-entry vocab): (K-groups, Launch). One group is the plain K order, the default's bits (session 38: 64 x 64 to
# 128 x 64 tiles never beat the default, 1.43x cuBLAS's split-K kernel at 128 rows: 32-64 programs on 132 SMs, each
# walking the whole vocab). Split-K (the vocab in 2-8 groups of whole K-tiles, one program per (tile, group), the fp32
# partials folded in order by the halves) fills the SMs; its bits are its own, fixed by the launch (a backward owes
# determinism, not batch invariance: CONTRACT.md), checked run to run and against the plain product's to rounding
BWD_DH_CANDIDATES = {
    "64x64": (1, Launch((64, 64, 4, 8), persistent=False)),
    "128x64": (1, Launch((128, 64, 4, 6), persistent=False)),
    "g2 128x128": (2, Launch((128, 128, 8, 4), split=1)),
    "g4 128x128": (4, Launch((128, 128, 8, 4), split=1)),
    "g8 128x128": (8, Launch((128, 128, 8, 4), split=1)),
    "g4 128x64": (4, Launch((128, 64, 4, 4), split=1)),
    "g8 128x64": (8, Launch((128, 64, 4, 4), split=1)),
    "g8 64x128": (8, Launch((64, 128, 4, 4), split=1)),
    "g8 128x128 halves": (8, Launch((128, 128, 8, 4), split=4)),
}


def host_split(fn, calls: int = 20) -> dict:
    """``fn``'s host time (``harness.host_us``: per call, queued behind a busy GPU) under ``checks.trusted_values`` (no
    value check), and that run's Python profile, its 12 heaviest functions by own time."""
    from harness import host_us

    from rlk_models.ops.checks import trusted_values

    with trusted_values():
        us, top = host_us(fn, calls, profile=True)
    return {"host_us_per_call": round(us, 1), "host_top_own_us": top}


def backward_split(ts: tuple[int, ...] = (128, 256, 512), replays: int = 10) -> dict:
    """Where the eager forward + backward's time goes at small T (#17: 1.80x torch at 128 rows, session 37):
    ``logprob_head`` forward and backward (the probabilities kept, the default) and torch's (``F.linear``, fp32
    ``log_softmax``, gather) under ``torch.profiler``: per call each kernel's microseconds, the GPU's busy and idle
    time; ours also without the targets' value check (``trusted_values``) and its host time (``host_split``); then
    the backward's dh product alone in each of ``BWD_DH_CANDIDATES`` against the default launch and cuBLAS's
    ``dl @ W`` (graphed time; bits against the default's, run to run, relative difference)."""
    from rlk_models.ops.checks import trusted_values

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    w = (torch.randn(V, K, device=dev, generator=g) * 0.02).bfloat16().requires_grad_()
    res = {"info": info()}
    for t in ts:
        h = torch.randn(t, K, device=dev, generator=g).bfloat16().requires_grad_()
        tgt = torch.randint(0, V, (t,), device=dev, generator=g)
        gl = torch.randn(t, device=dev, generator=g)

        def ours():
            return torch.autograd.grad(head.logprob_head(h, w, tgt, V)[0], [h, w], gl)

        def torch_ref():
            lp = F.linear(h, w).float().log_softmax(-1).gather(1, tgt[:, None])[:, 0]
            return torch.autograd.grad(lp, [h, w], gl)

        for name, fn in (("ours", ours), ("torch", torch_ref)):
            for _ in range(2):
                fn()
            torch.cuda.synchronize()
            r = res[f"T{t} {name}"] = {**profiled(fn, replays, "call"),
                                       "eager_us": round(do_bench_ms(fn, warmup=3, rep=20) * 1e3, 1)}
            if name == "ours":
                with trusted_values():
                    r["eager_unchecked_us"] = round(do_bench_ms(fn, warmup=3, rep=20) * 1e3, 1)
                r.update(host_split(fn))
            log(f"T={t} {name}: eager {r['eager_us']} us (unchecked {r.get('eager_unchecked_us')}, host "
                f"{r.get('host_us_per_call')}), busy {r['busy_us']} us, idle {r['idle_us_per_call']} us a call; "
                f"{r['kernels_us_per_call'][:8]}")
            if name == "ours":
                log(f"T={t} host, own us a call: {r['host_top_own_us']}")
        dl = (torch.randn(t, V, device=dev, generator=g) * 1e-3).bfloat16()
        wd = w.detach()
        want = head.mm(dl, wd, b_kn=True, groups=1, out=torch.empty(t, K, device=dev))
        dh = {"default": bench_graph(lambda: head.mm(dl, wd, b_kn=True, groups=1, out=want)) * 1e3,
              "cublas": bench_graph(lambda: dl @ wd) * 1e3}
        for name, (groups, lc) in BWD_DH_CANDIDATES.items():
            def run(out, groups=groups, lc=lc):
                return head.mm(dl, wd, b_kn=True, groups=groups, launch=lc, out=out)
            try:
                got = run(torch.empty(t, K, device=dev))
            except Exception as err:  # a candidate that does not build: said, and the next one
                dh[name] = f"{type(err).__name__}: {str(err)[:160]}"
                continue
            dh[name] = {"us": round(bench_graph(lambda: run(got)) * 1e3, 1), "bits_same": torch.equal(got, want),
                        "rerun_same": torch.equal(run(torch.empty(t, K, device=dev)), got),
                        "rel_diff": float((got - want).norm() / want.norm())}
        res[f"T{t} dh"] = dh
        log(f"T={t} dh = dl @ W: {dh}")
    save("head_backward_split", res)
    return res


def plot_backward(png: str, runs: list[tuple[str, str]], goal: float = 1.2) -> None:
    """Grouped bars (no GPU): each ``--backward-split`` JSON's eager forward + backward time over torch's, a bar
    group per row count, with #17's backward goal; ``runs`` are (label, path) pairs."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = [(label, json.loads(Path(path).read_text())) for label, path in runs]
    rows = sorted({int(k[1:].split()[0]) for _, d in data for k in d if k.endswith(" ours")})
    width = 0.8 / len(data)
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (label, d) in enumerate(data):
        have = [t for t in rows if f"T{t} ours" in d]
        ax.bar([rows.index(t) + i * width - 0.4 + width / 2 for t in have],
               [d[f"T{t} ours"]["eager_us"] / d[f"T{t} torch"]["eager_us"] for t in have], width, label=label)
    ax.axhline(goal, color="#c0392b", linestyle="--", linewidth=1, label=f"goal {goal:.2f}x")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(rows)), [str(t) for t in rows])
    ax.set_xlabel("rows (tokens)")
    ax.set_ylabel("eager fwd+bwd time / torch's")
    ax.set_title("Log-prob head forward + backward (kept probabilities) against torch, H200")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    log(f"wrote {png}")


def host_time(h: torch.Tensor, w: torch.Tensor, calls: int = 50) -> dict:
    """Host microseconds per ``full_logprobs`` call at decode sizes, eager (five Python-launched
    kernels and their buffers) against a replay of ``HeadGraphs`` (what the vLLM class runs):
    the time to enqueue ``calls`` calls, and per call with the GPU's work included."""
    from rlk_models.modeling.head_graphs import HeadGraphs

    graphs, out = HeadGraphs(), {}

    def full(x, out=None):
        return head.full_logprobs(x, w, V, out=out)

    for m in (1, 8, 64, 256):
        hm = h[:m]
        for name, fn in (("eager", lambda: full(hm)), ("graph", lambda: graphs(full, hm, w, V))):
            fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            out[f"{name}_M{m}"] = {"enqueue_us": round((t1 - t0) / calls * 1e6, 1),
                                   "per_call_us": round((t2 - t0) / calls * 1e6, 1)}
        print(f"M={m:3}: host per call eager {out[f'eager_M{m}']} | HeadGraphs {out[f'graph_M{m}']}", flush=True)
    return out


if __name__ == "__main__":
    if "--graph-split" in sys.argv[1:]:  # --graph-split [T,T,...]
        rest = sys.argv[sys.argv.index("--graph-split") + 1:]
        graph_split(tuple(int(t) for t in rest[0].split(",")) if rest else (1, 16, 128))
    elif "--plot-backward" in sys.argv[1:]:  # --plot-backward PNG LABEL=JSON ... (no GPU)
        rest = sys.argv[sys.argv.index("--plot-backward") + 1:]
        plot_backward(rest[0], [tuple(a.split("=", 1)) for a in rest[1:]])
    elif "--backward-split" in sys.argv[1:]:  # --backward-split [T,T,...]
        rest = sys.argv[sys.argv.index("--backward-split") + 1:]
        backward_split(tuple(int(t) for t in rest[0].split(",")) if rest else (128, 256, 512))
    elif "--stats-kernels" in sys.argv[1:]:  # --stats-kernels [T,T,...]
        rest = sys.argv[sys.argv.index("--stats-kernels") + 1:]
        stats_kernels(tuple(int(t) for t in rest[0].split(",")) if rest else (16384,))
    else:
        main()
