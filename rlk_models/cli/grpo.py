"""``rlk-grpo``: GRPO with vLLM rollouts and an HF-style trainer, checking at every step that
the trainer's log-probs equal the rollout's bit for bit *before* the update.

Loop (one step):
  1. rollout   -- an in-process ``vllm.LLM`` samples ``group_size`` completions (temperature 1)
                  for each of ``prompts_per_step`` prompts and reports each sampled token's
                  log-prob;
  2. reward    -- a verifiable toy reward (below); advantages are group-normalised
                  ``(r - mean_group) / (std_group + 1e-6)``;
  3. train     -- the training class computes ``token_logprobs`` of exactly the rolled-out
                  tokens; *this* forward is compared with the rollout's log-probs
                  (``mismatch_count``, ``max_abs_diff`` over all completion tokens) and then
                  differentiated through the PPO-clipped surrogate with ratio
                  ``exp(logp_train - logp_rollout)`` (exactly 1 when they agree), plus an
                  optional k3 KL penalty to the initial policy; AdamW on fp32 master weights,
                  copied to the model dtype after the step;
  4. sync      -- the new weights are pushed into the engine (``rlk_models.rollout.sync``), prefix
                  cache reset.

Toy task ("digits"): prompts are additions ``"a + b ="``; the reward of a completion is the
fraction of its non-space characters that are digits (a format reward a random tiny model
can learn within a few hundred steps on CPU). ``answer_acc`` (completion starts with a+b)
is reported too.

``--baseline`` runs the same loop with stock transformers for training and stock vLLM for
rollout (default ``raw_logprobs`` mode) on the same weights: its mismatch figures are what
rlk-models removes.

Writes ``OUT/metrics.jsonl`` (one JSON object per step) and ``OUT/metrics.png``.
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
from .common import add_verbose, at_least, checkpoint_dir, one_line_errors


@dataclass
class GRPOConfig:
    steps: int = 50
    prompts_per_step: int = 8
    group_size: int = 8
    max_new_tokens: int = 12
    lr: float = 3e-3
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    ppo_epochs: int = 1
    seed: int = 0
    dtype: str = "bfloat16"


# --- the toy task ------------------------------------------------------------------------------

def make_prompts(n: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        out.append((f"{a} + {b} =", a + b))
    return out


def reward(text: str) -> float:
    chars = [c for c in text if not c.isspace()]
    return sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0


def answer_correct(text: str, answer: int) -> bool:
    return text.strip().startswith(str(answer))


# --- the policies --------------------------------------------------------------------------------

def make_engine(ckpt: Path, cfg: GRPOConfig, max_model_len: int = 128):
    """rlk checkpoint: the rlk vLLM class (raw_logits); stock checkpoint (baseline): stock vLLM
    with its default raw_logprobs. Block size 32: stock CPU attention needs a multiple of 32."""
    from ..rollout.engine import make_llm

    return make_llm(ckpt, cfg.dtype, max_model_len, seed=cfg.seed, block_size=32,
                    max_num_batched_tokens=max(512, cfg.prompts_per_step * cfg.group_size * 2),
                    max_num_seqs=cfg.prompts_per_step * cfg.group_size)


def token_logprobs(model, ids: torch.Tensor, mask: torch.Tensor, baseline: bool) -> torch.Tensor:
    """[B, S-1] fp32 log-probs of the next tokens: the rlk head, or (baseline) stock
    transformers' logits -> float -> log_softmax, as a stock trainer would compute them."""
    if not baseline:
        return model.token_logprobs(ids, mask)
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
    rewards: torch.Tensor   # [prompts, group]
    adv: torch.Tensor       # [B] group-normalised advantages
    correct: list[bool]


def rollout(llm, tok, sp, batch: list[tuple[str, int]], cfg: GRPOConfig) -> Rollout:
    from vllm.inputs import TokensPrompt

    from ..rollout.engine import right_pad

    prompt_ids = [tok(p)["input_ids"] for p, _ in batch]
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids], sp, use_tqdm=False)
    seqs, comp_start, roll_lp, rewards, correct = [], [], [], [], []
    for (_, answer), p, o in zip(batch, prompt_ids, outs):
        for c in o.outputs:
            seqs.append(p + list(c.token_ids))
            comp_start.append(len(p))
            roll_lp.append([c.logprobs[k][t].logprob for k, t in enumerate(c.token_ids)])
            text = tok.decode(c.token_ids, skip_special_tokens=True)
            rewards.append(reward(text))
            correct.append(answer_correct(text, answer))
    r = torch.tensor(rewards).view(cfg.prompts_per_step, cfg.group_size)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).view(-1)
    ids, mask = right_pad(seqs)
    comp = torch.zeros(len(seqs), ids.shape[1] - 1, dtype=torch.bool)
    old = torch.zeros(len(seqs), ids.shape[1] - 1)
    for i, seq in enumerate(seqs):
        comp[i, comp_start[i] - 1:len(seq) - 1] = True
        old[i, comp_start[i] - 1:len(seq) - 1] = torch.tensor(roll_lp[i])
    return Rollout(ids, mask, comp, old, r, adv, correct)


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
    stats = {}
    if ref is not None:  # the reference policy does not change between PPO epochs
        with torch.no_grad():
            ref_lp = token_logprobs(ref, ro.ids, ro.mask, baseline)
    adv = ro.adv[:, None].to(ro.old.device)
    for epoch in range(cfg.ppo_epochs):
        lp = token_logprobs(model, ro.ids, ro.mask, baseline)
        if epoch == 0:  # before any update: the trainer must see exactly the rollout's numbers
            stats.update(parity_stats(lp.detach(), ro))
        loss = sequence_losses(lp, ro.old, ro.comp, adv, cfg, ref_lp if ref is not None else None).mean()
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
    from vllm import SamplingParams

    import rlk_models  # noqa: F401

    from ..rollout.sync import push_weights

    torch.manual_seed(cfg.seed)
    dtype = getattr(torch, cfg.dtype)
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype)
    model.train()
    ref = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype).eval() if cfg.kl_coef > 0 else None
    opt = MasterWeights(model, cfg.lr)
    llm = make_engine(ckpt, cfg)
    sp = SamplingParams(n=cfg.group_size, temperature=1.0, max_tokens=cfg.max_new_tokens, logprobs=0)
    pool = make_prompts(4096, cfg.seed)
    rng = random.Random(cfg.seed + 1)

    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.jsonl"
    metrics_path.write_text("")
    rows = []
    bar = tqdm(range(cfg.steps), desc="GRPO baseline" if baseline else "GRPO", disable=not progress)
    for step in bar:
        t0 = time.perf_counter()
        ro = rollout(llm, tok, sp, [pool[rng.randrange(len(pool))] for _ in range(cfg.prompts_per_step)], cfg)
        t1 = time.perf_counter()
        stats = ppo_update(model, ref, opt, ro, cfg, baseline)
        t2 = time.perf_counter()
        push_weights(llm, model)
        t3 = time.perf_counter()
        row = {"step": step, **stats, "reward_mean": float(ro.rewards.mean()), "reward_std": float(ro.rewards.std()),
               "answer_acc": sum(ro.correct) / len(ro.correct),
               "time_rollout": t1 - t0, "time_train": t2 - t1, "time_sync": t3 - t2}
        rows.append(row)
        with metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        bar.set_postfix(reward=f"{row['reward_mean']:.2f}", mismatch=row["mismatch_count"],
                        max_diff=f"{row['max_abs_diff']:.2g}")
    plot(rows, out / "metrics.png", "baseline (stock transformers + stock vLLM)" if baseline else "rlk-models")
    return rows


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    a.plot(steps, [r["mismatch_count"] for r in rows], label="mismatch_count", color="tab:red")
    a.set_ylabel("mismatch_count")
    a2 = a.twinx()
    a2.plot(steps, [r["max_abs_diff"] for r in rows], label="max_abs_diff", color="tab:purple", linestyle="--")
    a2.set_ylabel("max_abs_diff")
    a.set_title(f"{title}: trainer vs rollout log-probs before each update")
    b.plot(steps, [r["reward_mean"] for r in rows], label="reward_mean", color="tab:green")
    b.plot(steps, [r["answer_acc"] for r in rows], label="answer_acc", color="tab:blue", alpha=0.6)
    b.set_xlabel("step")
    b.set_ylabel("reward")
    b.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def default_checkpoint(out: Path, family: str, dtype: str) -> tuple[Path, Path]:
    """A tiny generated (stock) checkpoint in ``dtype`` and its rlk conversion under ``out``."""
    from ..conversion import convert
    from ..testing.tiny import make_tiny_hf_checkpoint

    hf = out / f"{family}-{dtype}-hf"
    if not (hf / "config.json").exists():
        make_tiny_hf_checkpoint(hf, family, dtype=getattr(torch, dtype))
    return hf, convert(hf, out / f"{family}-{dtype}-rlk", force=True, progress=False)


@one_line_errors("rlk-grpo")
def main(argv: list[str] | None = None) -> int:
    d = GRPOConfig()
    ap = argparse.ArgumentParser(prog="rlk-grpo", description="GRPO with a bitwise train/rollout log-prob check "
                                 "at every step (see rlk_models/cli/grpo.py).")
    ap.add_argument("--checkpoint", help="an rlk checkpoint (default: generate a tiny one under --out)")
    ap.add_argument("--family", choices=sorted(FAMILIES), default="qwen3", help="family of the generated checkpoint")
    ap.add_argument("--steps", type=at_least(1), default=d.steps, help=f"GRPO steps (default {d.steps})")
    ap.add_argument("--out", default="runs/grpo", help="output directory (metrics.jsonl, metrics.png)")
    ap.add_argument("--baseline", action="store_true", help="stock transformers + stock vLLM instead of rlk")
    ap.add_argument("--prompts-per-step", type=at_least(1), default=d.prompts_per_step)
    ap.add_argument("--group-size", type=at_least(2), default=d.group_size,
                    help="samples per prompt (>= 2: advantages are normalised within the group)")
    ap.add_argument("--max-new-tokens", type=at_least(1), default=d.max_new_tokens)
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--kl-coef", type=float, default=d.kl_coef)
    ap.add_argument("--ppo-epochs", type=at_least(1), default=d.ppo_epochs)
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default=d.dtype)
    ap.add_argument("--seed", type=int, default=d.seed)
    add_verbose(ap)
    args = ap.parse_args(argv)
    if args.lr <= 0 or args.kl_coef < 0:
        ap.error("--lr must be > 0 and --kl-coef >= 0")
    cfg = GRPOConfig(steps=args.steps, prompts_per_step=args.prompts_per_step, group_size=args.group_size,
                     max_new_tokens=args.max_new_tokens, lr=args.lr, kl_coef=args.kl_coef, ppo_epochs=args.ppo_epochs,
                     seed=args.seed, dtype=args.dtype)
    out = Path(args.out)
    if args.checkpoint:
        if args.baseline:
            ap.error("--baseline runs on the generated stock checkpoint; omit --checkpoint")
        ckpt = checkpoint_dir(args.checkpoint, rlk=True, tokenizer=True)
    else:
        hf, rlk = default_checkpoint(out / "checkpoints", args.family, args.dtype)
        ckpt = hf if args.baseline else rlk
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({**asdict(cfg), "checkpoint": str(ckpt), "baseline": args.baseline}))
    rows = run(ckpt, out, cfg, baseline=args.baseline)
    bad = [r["step"] for r in rows if r["mismatch_count"] or r["max_abs_diff"]]
    first, last = rows[: max(1, len(rows) // 10)], rows[-max(1, len(rows) // 10):]
    mean = lambda rs, k: sum(r[k] for r in rs) / len(rs)  # noqa: E731
    print(f"steps: {len(rows)}   reward_mean first 10%: {mean(first, 'reward_mean'):.3f}   "
          f"last 10%: {mean(last, 'reward_mean'):.3f}")
    print(f"mismatch_count total: {sum(r['mismatch_count'] for r in rows)} over "
          f"{sum(r['tokens'] for r in rows)} completion tokens; max_abs_diff max: "
          f"{max(r['max_abs_diff'] for r in rows):.3g}; steps with any mismatch: {len(bad)}")
    print(f"metrics: {out / 'metrics.jsonl'}   plot: {out / 'metrics.png'}")
    if args.baseline:
        return 0
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
