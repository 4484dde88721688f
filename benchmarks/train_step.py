"""One RL training step on the GPU -- token log-probs of a batch, their sum, backward -- with the rlk
training class against the stacks an RL user would otherwise train with, on the same random-init
Qwen3-shaped checkpoint (bf16 weights, no optimizer: the step every PPO/GRPO update repeats).

Stacks (each in its own process, so that peak memory and Liger's monkey-patching stay separate):
  ``rlk``            the training class, triton backend: ``token_logprobs`` (fused log-prob head,
                     no [T, V] logits), sum, backward; activations rebuilt in the backward (the default);
  ``rlk_keep``       the same with ``rlk_rebuild_activations=False`` (the rebuilds' time and memory);
  ``rlk_recompute``  the same with ``rlk_head_save_probs=False``: the head's backward recomputes the
                     logits instead of reading the probabilities kept from the forward;
  ``rlk_head_triton`` ``rlk`` with the head's statistics from the Triton kernel at every K
                     (``logprob_head.STATS_KERNEL = "triton"``; the default, "auto", takes the Gluon kernel
                     with the probabilities kept at K >= 4096: the same bits, tests/gpu);
  ``stock``          transformers' Qwen3 with SDPA attention: logits, fp32 cross-entropy (sum),
                     backward -- what ``model(ids).logits`` + ``log_softmax`` costs;
  ``liger``          the same model patched by Liger-Kernel (``apply_liger_kernel_to_qwen3``: RoPE,
                     RMSNorm, SwiGLU kernels) with its fused linear cross-entropy on the hidden
                     states (no logits);
  ``*_compile``      ``stock`` / ``liger`` with the whole step under ``torch.compile``.
Per stack: tokens/s of forward+backward and of a forward-only log-prob pass (median of
``--steps`` timed steps after warm-up), peak GPU memory of the step; for the rlk stacks on CUDA
also the forward-only pass by graph replays (``token_logprobs(..., cuda_graphs=True)``) and the
count of its log-probs that differ from the eager pass's (``forward_graphs_mismatch``), and the step by graph
replays with gradients (``train_graphs_*``: tokens/s, peak memory with the graphs' pools, log-probs and gradient
entries that differ from the eager step's); ratios against the fastest
non-rlk stack of the same run; ``--profile``: also one step's kernels per stack, by time, the
GPU's idle time within it (``harness.idle_gaps``: the longest gaps and their neighbours) and the
step's wall time split by CUDA events (``step_split``). Results:
``$OUT/train_step_<shape>.json``.

    python benchmarks/train_step.py --shape 1.7b
    python benchmarks/train_step.py --shape 8b --layers 4        # 4 of the 36 layers: memory
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stages import Stages, emit  # noqa: E402
from vllm_cuda import COMMON, SHAPES  # noqa: E402  (the random-init Qwen3 shapes, one definition)

STACKS = ["rlk", "rlk_keep", "rlk_recompute", "rlk_head_triton", "stock", "stock_compile", "liger",
          "liger_compile"]
RIVALS = [s for s in STACKS if not s.startswith("rlk")]


def stage_ckpt(a) -> dict:
    import torch

    from rlk_models.conversion import convert
    from rlk_models.testing.tiny import make_sized_hf_checkpoint

    shape = {**SHAPES[a.shape], **COMMON}
    if a.layers:
        shape["num_hidden_layers"] = a.layers
    tag = f"{a.shape}-{shape['num_hidden_layers']}l"
    with torch.device(a.device):
        hf = make_sized_hf_checkpoint(Path(a.work) / f"{tag}-hf", "qwen3", shape)
    backend = "triton" if a.device == "cuda" else "reference"
    rlk = convert(hf, Path(a.work) / f"{tag}-rlk", rlk_backend=backend, force=True, progress=False)
    return {"hf": str(hf), "rlk": str(rlk), "layers": shape["num_hidden_layers"]}


def _loss_fn(stack: str, model):
    """ids [B, S] -> the step's scalar: minus the sum of the B * (S - 1) next-token log-probs."""
    import torch.nn.functional as F

    if stack.startswith("rlk"):
        return lambda ids: -model.token_logprobs(ids).sum()
    if stack.startswith("stock"):
        def stock(ids):
            logits = model(input_ids=ids).logits[:, :-1]
            return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                   reduction="sum")
        return stock
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

    flce = LigerFusedLinearCrossEntropyLoss(reduction="sum")

    def liger(ids):
        h = model.model(input_ids=ids).last_hidden_state[:, :-1]
        return flce(model.lm_head.weight, h.reshape(-1, h.shape[-1]), ids[:, 1:].reshape(-1))
    return liger


def stage_stack(a) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    import rlk_models  # noqa: F401

    if a.stack.startswith("liger"):
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3

        apply_liger_kernel_to_qwen3(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=False)  # FLCE applied explicitly in _loss_fn
    rlk = a.stack.startswith("rlk")
    if a.stack == "rlk_head_triton":
        importlib.import_module("rlk_models.ops.triton.logprob_head").STATS_KERNEL = "triton"
    kw = ({"rlk_rebuild_activations": a.stack != "rlk_keep", "rlk_head_save_probs": a.stack != "rlk_recompute"}
          if rlk else {"attn_implementation": "sdpa"})
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, **kw).to(a.device).train()
    loss_fn = _loss_fn(a.stack, model)
    if a.stack.endswith("_compile"):
        loss_fn = torch.compile(loss_fn)
    g = torch.Generator(device=a.device).manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), device=a.device, generator=g)
    tokens = a.batch * (a.seq - 1)
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def timed(fn, steps: int) -> list[float]:
        out = []
        for _ in range(steps):
            sync()
            t = time.perf_counter()
            fn()
            sync()
            out.append(time.perf_counter() - t)
        return out

    def train_step():
        model.zero_grad(set_to_none=True)
        loss_fn(ids).backward()

    def forward_only():
        with torch.no_grad():
            loss_fn(ids)

    t0 = time.time()
    timed(train_step, a.warmup)  # includes torch.compile's first compilation
    warm_s = time.time() - t0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    step_s = sorted(timed(train_step, a.steps))[a.steps // 2]
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    model.zero_grad(set_to_none=True)
    timed(forward_only, 2)
    fwd_s = sorted(timed(forward_only, a.steps))[a.steps // 2]
    res = {"train_tok_per_s": round(tokens / step_s), "train_step_ms": round(step_s * 1e3, 2),
           "forward_tok_per_s": round(tokens / fwd_s), "peak_gib": round(peak / 2 ** 30, 2),
           "warmup_s": round(warm_s, 1)}
    if rlk and cuda:  # the same pass by CUDA graph replays (cuda_graphs=True), checked against the eager one
        def forward_graphs():
            with torch.no_grad():
                return -model.token_logprobs(ids, cuda_graphs=True).sum()

        with torch.no_grad():
            eager, graphed = model.token_logprobs(ids), model.token_logprobs(ids, cuda_graphs=True)
        timed(forward_graphs, 2)
        res["forward_graphs_tok_per_s"] = round(tokens / sorted(timed(forward_graphs, a.steps))[a.steps // 2])
        res["forward_graphs_mismatch"] = int((eager != graphed).sum())
        res.update(train_graphs(model, ids, timed, a.steps, tokens))
    if a.profile and cuda:
        res["kernels"] = step_kernels(train_step)
        res["forward_kernels"] = step_kernels(forward_only)  # the RL "old policy" pass
        res["split"] = step_split(model, loss_fn, ids)
    return res


def train_graphs(model, ids, timed, steps: int, tokens: int) -> dict:
    """The rlk step by graph replays (``token_logprobs(..., cuda_graphs=True)`` with gradients: forward and backward
    graphs): its tokens/s, its peak memory over the replayed steps (the graphs' pools included; the eager step's
    ``peak_gib`` is measured the same way) and over the capture, the GPU memory the allocator holds after them, and
    how many log-probs and gradient entries differ from the eager step's (the gradients are the padded batch's:
    ``modeling.logprob_graphs``). The compared gradients are kept in host memory, out of the peaks."""
    import torch

    def step(graphs: bool):
        model.zero_grad(set_to_none=True)
        logp = model.token_logprobs(ids, cuda_graphs=graphs)
        (-logp.sum()).backward()
        return logp.detach(), [p.grad.cpu() for p in model.parameters() if p.grad is not None]

    def graphed():
        model.zero_grad(set_to_none=True)
        (-model.token_logprobs(ids, cuda_graphs=True).sum()).backward()

    eager_lp, eager_g = step(False)
    model.zero_grad(set_to_none=True)
    torch.cuda.reset_peak_memory_stats()
    graph_lp, graph_g = step(True)  # the capture
    capture_peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    timed(graphed, 2)
    step_s = sorted(timed(graphed, steps))[steps // 2]
    out = {"train_graphs_tok_per_s": round(tokens / step_s), "train_graphs_step_ms": round(step_s * 1e3, 2),
           "train_graphs_peak_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2),
           "train_graphs_capture_peak_gib": round(capture_peak / 2 ** 30, 2),
           "train_graphs_reserved_gib": round(torch.cuda.memory_reserved() / 2 ** 30, 2),
           "train_graphs_logp_mismatch": int((eager_lp != graph_lp).sum()),
           "train_graphs_grad_mismatch": sum(int((x != y).sum()) for x, y in zip(eager_g, graph_g)),
           "train_graphs_grad_entries": sum(x.numel() for x in eager_g)}
    model.logprob_graphs.clear()
    model.zero_grad(set_to_none=True)
    return out


def step_split(model, loss_fn, ids, reps: int = 3) -> dict:
    """Where a step's wall time goes (median of ``reps`` steps, ms): GPU time between CUDA events
    recorded at the step's start, after the forward's launches and after the backward's; the host's
    time to launch the forward and the backward; the wall time to the final sync. Against the
    profiled kernel span: host work the GPU waits for at the step's edges shows as wall > GPU."""
    import statistics

    import torch

    rows = []
    for _ in range(reps):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ev[0].record()
        model.zero_grad(set_to_none=True)
        loss = loss_fn(ids)
        ev[1].record()
        t1 = time.perf_counter()
        loss.backward()
        ev[2].record()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        rows.append({"gpu_forward": ev[0].elapsed_time(ev[1]), "gpu_backward": ev[1].elapsed_time(ev[2]),
                     "host_forward": (t1 - t0) * 1e3, "host_backward": (t2 - t1) * 1e3, "wall": (t3 - t0) * 1e3})
    return {k: round(statistics.median(r[k] for r in rows), 2) for k in rows[0]}


def step_kernels(step, top: int = 30) -> dict:
    """One step's GPU kernels under torch.profiler (after the timed steps, so no timing includes
    it): the step's total kernel time and launches, and the ``top`` kernels by time -- where one
    stack's step is slower than another's."""
    import torch
    from harness import idle_gaps, kernel_rows, profiled_kernels
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    rows = kernel_rows(prof)
    return {"total_ms": round(sum(r[2] for r in rows) / 1e3, 2), "launches": sum(r[1] for r in rows),
            "top": [{"kernel": k[:110], "n": n, "ms": round(t / 1e3, 3)} for k, n, t in rows[:top]],
            "idle": idle_gaps(profiled_kernels(prof))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stage", nargs="?", default="all", choices=["all", "ckpt", "stack"])
    ap.add_argument("--shape", default="1.7b", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=0, help="override the shape's layer count (0: keep)")
    ap.add_argument("--stacks", default=",".join(STACKS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda", help="cuda; cpu only smoke-tests the script (reference backend)")
    ap.add_argument("--work", default="/tmp/train_step")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--limit", type=float, default=400, help="seconds per stack process")
    ap.add_argument("--profile", action="store_true",
                    help="also one step's and one forward-only pass's kernels per stack (torch.profiler)")
    ap.add_argument("--stack")
    ap.add_argument("--model")
    a = ap.parse_args()
    if a.stage != "all":
        emit({"ckpt": stage_ckpt, "stack": stage_stack}[a.stage](a))
        return
    unknown = [s for s in a.stacks.split(",") if s not in STACKS]
    if unknown:
        ap.error(f"unknown stack(s) {unknown}; choose from {STACKS}")
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    out_path = Path(a.out) / f"train_step_{a.shape}.json"
    summary: dict = {"shape": a.shape, "batch": a.batch, "seq": a.seq, "steps": a.steps}
    common = ["--shape", a.shape, "--layers", str(a.layers), "--batch", str(a.batch), "--seq", str(a.seq),
              "--steps", str(a.steps), "--warmup", str(a.warmup), "--work", a.work, "--device", a.device]
    common += ["--profile"] * a.profile

    stages = Stages(__file__, out_path, summary, common, a.limit)
    run = stages.run
    ck = run("ckpt", ["ckpt"])
    if "error" in ck:
        return
    for stack in a.stacks.split(","):
        run(stack, ["stack", "--stack", stack, "--model", ck["rlk"] if stack.startswith("rlk") else ck["hf"]])
    rivals = [summary[s] for s in RIVALS if "train_tok_per_s" in summary.get(s, {})]
    rlk = summary.get("rlk", {})
    if rivals and "train_tok_per_s" in rlk:
        best = max(rivals, key=lambda r: r["train_tok_per_s"])
        best_fwd = max(r["forward_tok_per_s"] for r in rivals)
        summary["rlk_vs_fastest_rival"] = {
            "train": round(rlk["train_tok_per_s"] / best["train_tok_per_s"], 3),
            "forward": round(rlk["forward_tok_per_s"] / best_fwd, 3),
            "forward_graphs": round(rlk.get("forward_graphs_tok_per_s", 0) / best_fwd, 3),
            "train_graphs": round(rlk.get("train_graphs_tok_per_s", 0) / best["train_tok_per_s"], 3),
            "peak_memory": round(rlk["peak_gib"] / best["peak_gib"], 3) if best["peak_gib"] else None}
    stages.save()
    print(json.dumps({k: v for k, v in summary.items() if k != "ckpt"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
