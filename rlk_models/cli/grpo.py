"""``rlk-grpo``, the main job: GRPO that learns, with vLLM rollouts and an HF-style trainer,
checking at every step that the trainer's log-probs equal the rollout's bit for bit *before* the
update -- and the same run with stock transformers + stock vLLM for contrast.

Task (``rlk_models.training.arith``): additions ``"a + b ="`` (operands 0..19), reward 1 for the
right sum, else 0. A tiny generated checkpoint is first pre-trained (SFT, cached under
``--out``) on all pairs from a corpus where half the answers copy the second operand, so it
starts split between the sum and the copy; GRPO on 70% of the pairs has to drop the copy habit,
and accuracy on the 30% held out from RL says whether it did beyond its own prompts.

Loop (one step):
  1. rollout   -- an in-process ``vllm.LLM`` samples ``group_size`` completions (temperature 1)
                  for each of ``prompts_per_step`` prompts and reports each sampled token's
                  log-prob;
  2. reward    -- correctness; advantages are group-normalised ``(r - mean) / (std + 1e-6)``;
  3. train     -- the training class computes ``token_logprobs`` of exactly the rolled-out
                  tokens; *this* forward is compared with the rollout's log-probs
                  (``mismatch_count``, ``max_abs_diff`` over all completion tokens) and then
                  differentiated through the PPO-clipped surrogate with ratio
                  ``exp(logp_train - logp_rollout)`` (exactly 1 when they agree), plus an
                  optional k3 KL penalty to the initial policy; AdamW on fp32 master weights,
                  copied to the model dtype after the step;
  4. sync      -- the new weights are pushed into the engine (``rlk_models.rollout.sync``), prefix
                  cache reset.
Every ``eval_every`` steps (and before the first and after the last) the engine samples
``eval_samples`` answers per held-out prompt at temperature 1 (``heldout_acc``) and one greedily
(``heldout_greedy``).

Runs (``--runs``, default both): ``rlk`` (the rlk checkpoint: rlk training class + rlk vLLM
class) and ``stock`` (the same SFT weights in stock transformers + stock vLLM with its default
``raw_logprobs``): its mismatch and importance-ratio spread are what rlk-models removes.

Writes ``OUT/<run>/metrics.jsonl`` (one JSON object per step), ``OUT/summary.json`` and
``OUT/grpo.png`` (mismatch and ratio spread per step; held-out accuracy).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..families import FAMILIES
from ..training import arith
from .common import add_verbose, at_least, checkpoint_dir, one_line_errors

RUNS = ("rlk", "stock")
# model shapes of the generated checkpoint (the tiny tokenizer either way: every sum is one token);
# "0.6b" is Qwen3-0.6B's shape for GPU runs (--device cuda), with learning rates scaled down for depth
SHAPES = {
    "tiny": {"config": {}, "sft_lr": 3e-3, "lr": 5e-4},
    "0.6b": {"config": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                            num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
             "sft_lr": 1e-4, "lr": 2e-5},
}


@dataclass
class GRPOConfig:
    steps: int = 100
    prompts_per_step: int = 8
    group_size: int = 8
    max_new_tokens: int = 4
    lr: float = 5e-4
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    ppo_epochs: int = 1
    seed: int = 0
    dtype: str = "bfloat16"
    eval_every: int = 20
    eval_samples: int = 8
    device: str = "cpu"
    cuda_graphs: bool = False  # the rlk trainer's log-prob passes by CUDA graph replays (CUDA only)


# --- the policies --------------------------------------------------------------------------------

def make_engine(ckpt: Path, cfg: GRPOConfig, max_model_len: int = 128):
    """rlk checkpoint: the rlk vLLM class (raw_logits); stock checkpoint (baseline): stock vLLM
    with its default raw_logprobs. Block size 32: stock CPU attention needs a multiple of 32."""
    from ..rollout.engine import make_llm

    gpu = {"gpu_memory_utilization": 0.5} if cfg.device.startswith("cuda") else {}  # the trainer shares the GPU
    return make_llm(ckpt, cfg.dtype, max_model_len, seed=cfg.seed, block_size=32,
                    max_num_batched_tokens=max(512, cfg.prompts_per_step * cfg.group_size * 2),
                    max_num_seqs=cfg.prompts_per_step * cfg.group_size, **gpu)


def token_logprobs(model, ids: torch.Tensor, mask: torch.Tensor, baseline: bool,
                   cuda_graphs: bool = False, comp: torch.Tensor | None = None) -> torch.Tensor:
    """[B, S-1] fp32 log-probs of the next tokens: the rlk head (``cuda_graphs``: the same bits by graph
    replays; ``comp``: over those positions only, 0 elsewhere), or (baseline) stock transformers' logits ->
    float -> log_softmax, as a stock trainer would compute them."""
    if not baseline:
        return model.token_logprobs(ids, mask, cuda_graphs=cuda_graphs, score_mask=comp)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    return logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]


class MasterWeights:
    """fp32 master copy of the parameters with AdamW; the model keeps its own dtype."""

    def __init__(self, model, lr: float):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.master = [p.detach().float().clone().requires_grad_() for p in self.params]
        self.opt = torch.optim.AdamW(self.master, lr=lr, betas=(0.9, 0.99), weight_decay=0.0)

    @torch.no_grad()
    def step(self) -> None:
        for p, m in zip(self.params, self.master):
            m.grad = None if p.grad is None else p.grad.float()
        self.opt.step()
        for p, m in zip(self.params, self.master):
            p.copy_(m)
            p.grad = None


# --- one run ------------------------------------------------------------------------------------

@dataclass
class Rollout:
    """One step's sampled groups, padded for the trainer."""
    ids: torch.Tensor       # [B, S] prompt + completion, right-padded
    mask: torch.Tensor      # [B, S]
    comp: torch.Tensor      # [B, S-1] bool: the position predicts a completion token
    old: torch.Tensor       # [B, S-1] the rollout engine's log-probs there (0 elsewhere)
    rewards: torch.Tensor   # [prompts, group]: 1 for a right answer
    adv: torch.Tensor       # [B] group-normalised advantages

    def to(self, device) -> "Rollout":
        return Rollout(*(t.to(device) for t in (self.ids, self.mask, self.comp, self.old, self.rewards, self.adv)))


def rollout_params(cfg: GRPOConfig):
    """The rollouts' sampling: ``cfg.group_size`` completions a prompt at temperature 1 with the sampled tokens'
    log-probs, as token ids (``rollout`` decodes them for the rewards; vLLM's front end would otherwise detokenize
    every log-prob entry too, ~24 us of host time a token)."""
    from vllm import SamplingParams

    return SamplingParams(n=cfg.group_size, temperature=1.0, max_tokens=cfg.max_new_tokens, logprobs=0,
                          detokenize=False)


def rollout(llm, tok, sp, batch: list[tuple[int, int]], cfg: GRPOConfig, reward=arith.reward) -> Rollout:
    """Sample ``sp.n`` completions per prompt; ``reward(text, a, b)`` scores each."""
    from vllm.inputs import TokensPrompt

    from ..rollout.engine import right_pad

    prompt_ids = [tok(arith.prompt(a, b))["input_ids"] for a, b in batch]
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids], sp, use_tqdm=False)
    seqs, comp_start, roll_lp, rewards = [], [], [], []
    for (a, b), p, o in zip(batch, prompt_ids, outs):
        for c in o.outputs:
            seqs.append(p + list(c.token_ids))
            comp_start.append(len(p))
            roll_lp.append([c.logprobs[k][t].logprob for k, t in enumerate(c.token_ids)])
            rewards.append(reward(tok.decode(c.token_ids, skip_special_tokens=True), a, b))
    r = torch.tensor(rewards).view(len(batch), -1)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).view(-1)
    ids, mask = right_pad(seqs)
    comp = torch.zeros(len(seqs), ids.shape[1] - 1, dtype=torch.bool)
    old = torch.zeros(len(seqs), ids.shape[1] - 1)
    for i, seq in enumerate(seqs):
        comp[i, comp_start[i] - 1:len(seq) - 1] = True
        old[i, comp_start[i] - 1:len(seq) - 1] = torch.tensor(roll_lp[i])
    return Rollout(ids, mask, comp, old, r, adv)


def evaluate(llm, tok, pairs: list[tuple[int, int]], samples: int, seed: int) -> dict:
    """Held-out accuracy: ``samples`` answers per prompt at temperature 1 (seeded per request, so
    the RL sampling stream is untouched) and one greedy answer."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=tok(arith.prompt(a, b))["input_ids"]) for a, b in pairs]
    sampled = llm.generate(prompts, [SamplingParams(n=samples, temperature=1.0, max_tokens=4, seed=seed + i)
                                     for i in range(len(prompts))], use_tqdm=False)
    greedy = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=4), use_tqdm=False)
    ok = lambda c, ab: arith.correct(tok.decode(c.token_ids, skip_special_tokens=True), *ab)  # noqa: E731
    return {"heldout_acc": sum(ok(c, ab) for o, ab in zip(sampled, pairs) for c in o.outputs) / (len(pairs) * samples),
            "heldout_greedy": sum(ok(o.outputs[0], ab) for o, ab in zip(greedy, pairs)) / len(pairs)}


def parity_stats(lp: torch.Tensor, ro: Rollout) -> dict:
    """Trainer vs rollout log-probs on the completion tokens, before any update."""
    diff = (lp - ro.old)[ro.comp]
    return {"mismatch_count": int((diff != 0).sum()), "max_abs_diff": float(diff.abs().max()) if diff.numel() else 0.0,
            "tokens": int(ro.comp.sum()),
            "kl_rollout_train": float(((ro.old - lp).exp() - (ro.old - lp) - 1)[ro.comp].mean())}


def sequence_losses(lp: torch.Tensor, old: torch.Tensor, comp: torch.Tensor, adv: torch.Tensor, cfg: GRPOConfig,
                    ref_lp: torch.Tensor | None = None) -> torch.Tensor:
    """[B] per-sequence PPO-clipped surrogate (mean over the sequence's completion tokens) with
    ratio ``exp(lp - old)``, plus ``cfg.kl_coef`` x k3 KL to ``ref_lp`` when given."""
    ratio = (lp - old).exp()
    per_tok = -torch.minimum(ratio * adv, ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv)
    if ref_lp is not None:
        per_tok = per_tok + cfg.kl_coef * ((ref_lp - lp).exp() - (ref_lp - lp) - 1)
    return (per_tok * comp).sum(1) / comp.sum(1).clamp_min(1)


def ratio_stats(lp: torch.Tensor, old: torch.Tensor, comp: torch.Tensor, cfg: GRPOConfig) -> dict:
    rc = (lp - old).exp()[comp]
    return dict(ratio_mean=float(rc.mean()), ratio_min=float(rc.min()), ratio_max=float(rc.max()),
                clip_frac=float(((rc - 1).abs() > cfg.clip_eps).float().mean()))


def ppo_update(model, ref, opt: MasterWeights, ro: Rollout, cfg: GRPOConfig, baseline: bool) -> dict:
    """``cfg.ppo_epochs`` clipped-surrogate steps (+ k3 KL to the reference); the first epoch's
    parity and ratio statistics."""
    stats, ref_lp = {}, None
    graphs = cfg.cuda_graphs and not baseline
    if ref is not None:  # the reference policy does not change between PPO epochs
        with torch.no_grad():
            ref_lp = token_logprobs(ref, ro.ids, ro.mask, baseline, graphs, ro.comp)
    adv = ro.adv[:, None]
    for epoch in range(cfg.ppo_epochs):
        lp = token_logprobs(model, ro.ids, ro.mask, baseline, graphs, ro.comp)
        if epoch == 0:  # before any update: the trainer must see exactly the rollout's numbers
            stats.update(parity_stats(lp.detach(), ro))
        loss = sequence_losses(lp, ro.old, ro.comp, adv, cfg, ref_lp).mean()
        if epoch == 0:
            stats.update(ratio_stats(lp.detach(), ro.old, ro.comp, cfg), loss=float(loss.detach()))
        loss.backward()
        opt.step()
    return stats


def run(ckpt: Path, out: Path, cfg: GRPOConfig, baseline: bool = False, progress: bool = True) -> list[dict]:
    from ..rollout.engine import in_process_env

    in_process_env()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rlk_models  # noqa: F401

    from ..rollout.engine import close_llm
    from ..rollout.sync import push_weights

    torch.manual_seed(cfg.seed)
    dtype = getattr(torch, cfg.dtype)
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype).to(cfg.device)
    model.train()
    ref = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype).to(cfg.device).eval() if cfg.kl_coef > 0 else None
    opt = MasterWeights(model, cfg.lr)
    llm = make_engine(ckpt, cfg)
    sp = rollout_params(cfg)
    pool, held_out = arith.split()
    rng = random.Random(cfg.seed + 1)

    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.jsonl"
    metrics_path.write_text("")
    rows = []
    bar = tqdm(range(cfg.steps), desc="GRPO stock" if baseline else "GRPO rlk", disable=not progress)
    for step in bar:
        t0 = time.perf_counter()
        ev = evaluate(llm, tok, held_out, cfg.eval_samples, cfg.seed) if step % cfg.eval_every == 0 else {}
        t1 = time.perf_counter()
        ro = rollout(llm, tok, sp, [pool[rng.randrange(len(pool))] for _ in range(cfg.prompts_per_step)], cfg)
        ro = ro.to(cfg.device)
        t2 = time.perf_counter()
        stats = ppo_update(model, ref, opt, ro, cfg, baseline)
        t3 = time.perf_counter()
        push_weights(llm, model)
        t4 = time.perf_counter()
        row = {"step": step, **stats, "ratio_spread": stats["ratio_max"] - stats["ratio_min"],
               "reward_mean": float(ro.rewards.mean()), **ev,
               "time_eval": t1 - t0, "time_rollout": t2 - t1, "time_train": t3 - t2, "time_sync": t4 - t3}
        rows.append(row)
        with metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        bar.set_postfix(reward=f"{row['reward_mean']:.2f}", mismatch=row["mismatch_count"])
    final = {"step": cfg.steps, **evaluate(llm, tok, held_out, cfg.eval_samples, cfg.seed)}
    rows.append(final)  # the policy after the last update: evaluation only
    with metrics_path.open("a") as f:
        f.write(json.dumps(final) + "\n")
    close_llm(llm)
    return rows


def load_rows(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


def summarize(rows: list[dict]) -> dict:
    """Parity over the update steps; held-out accuracy before the first and after the last."""
    upd = [r for r in rows if "mismatch_count" in r]
    evals = [r for r in rows if "heldout_acc" in r]
    tenth = max(1, len(upd) // 10)
    return {"steps": len(upd), "tokens": sum(r["tokens"] for r in upd),
            "mismatch_count": sum(r["mismatch_count"] for r in upd),
            "steps_with_mismatch": sum(bool(r["mismatch_count"] or r["max_abs_diff"]) for r in upd),
            "max_abs_diff": max(r["max_abs_diff"] for r in upd),
            "ratio_min": min(r["ratio_min"] for r in upd), "ratio_max": max(r["ratio_max"] for r in upd),
            "ratio_spread_mean": sum(r["ratio_spread"] for r in upd) / len(upd),
            "clip_frac_mean": sum(r["clip_frac"] for r in upd) / len(upd),
            "heldout_acc_before": evals[0]["heldout_acc"], "heldout_acc_after": evals[-1]["heldout_acc"],
            "heldout_greedy_before": evals[0]["heldout_greedy"], "heldout_greedy_after": evals[-1]["heldout_greedy"],
            "reward_first_10pct": sum(r["reward_mean"] for r in upd[:tenth]) / tenth,
            "reward_last_10pct": sum(r["reward_mean"] for r in upd[-tenth:]) / tenth}


LABELS = {"rlk": ("rlk-models", "tab:green"), "stock": ("stock transformers + stock vLLM", "tab:red")}


def plot(runs: dict[str, list[dict]], path: Path) -> None:
    """Two panels: trainer-vs-rollout mismatch (fraction of completion tokens) and importance-ratio
    spread before each update; held-out accuracy (sampled, solid; greedy, dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    a2 = a.twinx()
    for name, rows in runs.items():
        label, color = LABELS[name]
        upd = [r for r in rows if "mismatch_count" in r]
        steps = [r["step"] for r in upd]
        a.plot(steps, [r["mismatch_count"] / max(1, r["tokens"]) for r in upd], color=color, label=f"{label}: mismatch")
        a2.plot(steps, [r["ratio_spread"] for r in upd], color=color, linestyle=":", label=f"{label}: ratio spread")
        ev = [r for r in rows if "heldout_acc" in r]
        b.plot([r["step"] for r in ev], [r["heldout_acc"] for r in ev], color=color, marker="o", label=f"{label}")
        b.plot([r["step"] for r in ev], [r["heldout_greedy"] for r in ev], color=color, linestyle="--", alpha=0.6,
               label=f"{label} (greedy)")
    a.set_ylabel("mismatching tokens (fraction)")
    a2.set_ylabel("ratio max - min (dotted)")
    a.set_title("trainer vs vLLM rollout log-probs, before each update")
    handles = [h for ax in (a, a2) for h in ax.get_legend_handles_labels()[0]]
    a.legend(handles, [h.get_label() for h in handles], loc="center left", fontsize=8)
    b.set_ylabel("held-out accuracy")
    b.set_xlabel("GRPO step")
    b.set_title("answer accuracy on the additions held out from RL (temperature 1; greedy dashed)")
    b.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def default_checkpoints(out: Path, family: str, shape: str, sft_cfg: arith.SFTConfig,
                        progress: bool) -> tuple[Path, Path]:
    """The generated checkpoint of ``family`` and ``shape`` after the arithmetic SFT (stock, bf16)
    and its rlk conversion (the triton backend when the SFT ran on CUDA), under ``out`` (cached:
    the SFT reruns only when its settings change)."""
    from ..conversion import convert
    from ..testing.tiny import make_tiny_hf_checkpoint

    name = family if shape == "tiny" else f"{family}-{shape}"
    base = out / f"{name}-base"
    if not (base / "config.json").exists():
        make_tiny_hf_checkpoint(base, family, dtype=torch.float32, **SHAPES[shape]["config"])
    hf = arith.sft(base, out / f"{name}-sft-hf", sft_cfg, progress=progress)
    rlk = out / f"{name}-sft-rlk"
    stamp = rlk / "sft.json"
    if not stamp.exists() or stamp.read_text() != (hf / "sft.json").read_text():
        backend = "triton" if sft_cfg.device.startswith("cuda") else None
        convert(hf, rlk, force=True, progress=False, rlk_backend=backend)
        stamp.write_text((hf / "sft.json").read_text())
    return hf, rlk


@one_line_errors("rlk-grpo")
def main(argv: list[str] | None = None) -> int:
    d, ds = GRPOConfig(), arith.SFTConfig()
    ap = argparse.ArgumentParser(prog="rlk-grpo", description="GRPO on additions with a bitwise train/rollout "
                                 "log-prob check at every step, and the stock contrast (see rlk_models/cli/grpo.py).")
    ap.add_argument("--checkpoint", help="an rlk checkpoint to train (default: SFT a tiny generated one under --out; "
                    "runs rlk only)")
    ap.add_argument("--family", choices=sorted(FAMILIES), default="qwen3", help="family of the generated checkpoint")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny",
                    help="size of the generated checkpoint (0.6b: Qwen3-0.6B's, for --device cuda)")
    ap.add_argument("--runs", help="comma list of rlk, stock (default both; rlk with --checkpoint)")
    ap.add_argument("--steps", type=at_least(1), default=d.steps, help=f"GRPO steps (default {d.steps})")
    ap.add_argument("--out", default="runs/grpo", help="output directory (per-run metrics.jsonl, grpo.png, summary)")
    ap.add_argument("--prompts-per-step", type=at_least(1), default=d.prompts_per_step)
    ap.add_argument("--group-size", type=at_least(2), default=d.group_size,
                    help="samples per prompt (>= 2: advantages are normalised within the group)")
    ap.add_argument("--max-new-tokens", type=at_least(1), default=d.max_new_tokens)
    ap.add_argument("--lr", type=float, help=f"GRPO learning rate (default: the shape's; tiny {d.lr})")
    ap.add_argument("--kl-coef", type=float, default=d.kl_coef)
    ap.add_argument("--ppo-epochs", type=at_least(1), default=d.ppo_epochs)
    ap.add_argument("--eval-every", type=at_least(1), default=d.eval_every)
    ap.add_argument("--eval-samples", type=at_least(1), default=d.eval_samples)
    ap.add_argument("--sft-steps", type=at_least(1), default=ds.steps, help=f"pre-training steps (default {ds.steps})")
    ap.add_argument("--sft-noise", type=float, default=ds.noise, help="fraction of wrong answers in the SFT corpus")
    ap.add_argument("--sft-lr", type=float, help="pre-training learning rate (default: the shape's)")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default=d.dtype)
    ap.add_argument("--device", default=d.device, help="the trainer's device (cuda: the engine runs there too)")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="with --device cuda: the rlk trainer's log-prob passes (reference; policy, backward included) "
                    "by CUDA graph replays, the same log-probs bit for bit (token_logprobs(..., cuda_graphs=True)); "
                    "the stock run ignores it")
    ap.add_argument("--seed", type=int, default=d.seed, help="GRPO seed (sampling, prompt order); the SFT is shared")
    add_verbose(ap)
    args = ap.parse_args(argv)
    runs = [r for r in (args.runs or ("rlk" if args.checkpoint else ",".join(RUNS))).split(",") if r]
    if not runs or any(r not in RUNS for r in runs):
        ap.error(f"--runs: a comma list of {', '.join(RUNS)}, got {args.runs!r}")
    args.lr = SHAPES[args.shape]["lr"] if args.lr is None else args.lr
    args.sft_lr = SHAPES[args.shape]["sft_lr"] if args.sft_lr is None else args.sft_lr
    if args.lr <= 0 or args.sft_lr <= 0 or args.kl_coef < 0:
        ap.error("--lr and --sft-lr must be > 0 and --kl-coef >= 0")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: no CUDA GPU here")
    if args.cuda_graphs and not args.device.startswith("cuda"):
        ap.error(f"--cuda-graphs needs --device cuda (CUDA graphs), got --device {args.device}")
    if not 0 <= args.sft_noise < 1:
        ap.error("--sft-noise must be in [0, 1)")
    cfg = GRPOConfig(steps=args.steps, prompts_per_step=args.prompts_per_step, group_size=args.group_size,
                     max_new_tokens=args.max_new_tokens, lr=args.lr, kl_coef=args.kl_coef, ppo_epochs=args.ppo_epochs,
                     seed=args.seed, dtype=args.dtype, eval_every=args.eval_every, eval_samples=args.eval_samples,
                     device=args.device, cuda_graphs=args.cuda_graphs)
    out = Path(args.out)
    if args.checkpoint:
        if runs != ["rlk"]:
            ap.error("--checkpoint trains that rlk checkpoint only (--runs rlk); the stock contrast needs the "
                     "generated checkpoint")
        ckpts = {"rlk": checkpoint_dir(args.checkpoint, rlk=True, tokenizer=True)}
    else:
        sft_cfg = arith.SFTConfig(steps=args.sft_steps, lr=args.sft_lr, noise=args.sft_noise, device=args.device,
                                  dtype=args.dtype)
        hf, rlk = default_checkpoints(out / "checkpoints", args.family, args.shape, sft_cfg, progress=True)
        ckpts = {"rlk": rlk, "stock": hf}
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in runs:
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "config.json").write_text(json.dumps({**asdict(cfg), "checkpoint": str(ckpts[name])}))
        results[name] = run(ckpts[name], out / name, cfg, baseline=name == "stock")
    for name in RUNS:  # the other run, done earlier under --out with the same settings (on a GPU each
        prev = out / name  # run takes its own process: an engine's GPU memory is freed with its process)
        if name not in results and (prev / "metrics.jsonl").exists() and (prev / "config.json").exists():
            same = {"checkpoint": None, "cuda_graphs": None}  # neither changes what a run computes
            if {**json.loads((prev / "config.json").read_text()), **same} == {**asdict(cfg), **same}:
                results[name] = load_rows(prev)
    summary = {name: summarize(rows) for name, rows in results.items()}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    plot(results, out / "grpo.png")
    for name, sm in summary.items():
        print(f"{LABELS[name][0]}: {sm['steps']} steps, mismatching log-probs {sm['mismatch_count']} / {sm['tokens']} "
              f"(steps with any: {sm['steps_with_mismatch']}, max abs diff {sm['max_abs_diff']:.3g}), importance "
              f"ratio in [{sm['ratio_min']:.4g}, {sm['ratio_max']:.4g}]; held-out accuracy "
              f"{sm['heldout_acc_before']:.3f} -> {sm['heldout_acc_after']:.3f} (greedy "
              f"{sm['heldout_greedy_before']:.3f} -> {sm['heldout_greedy_after']:.3f})")
    print(f"metrics: {out}/<run>/metrics.jsonl   summary: {out / 'summary.json'}   plot: {out / 'grpo.png'}")
    rlk_bad = summary.get("rlk", {}).get("steps_with_mismatch", 0)
    return 0 if not rlk_bad else 1


if __name__ == "__main__":
    sys.exit(main())
