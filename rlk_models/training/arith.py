"""The main job's task: additions ``"a + b ="`` with a correctness reward, on a tiny model that
knows something before RL.

Pairs ``(a, b)`` with ``0 <= a, b < SIZE`` are split once (fixed seed) into the RL prompts (70%)
and a set held out from RL (30%, ``split``). Supervised pre-training (``sft``) teaches every pair
from a corpus with a *systematic error*: a fraction ``noise`` of its examples answer with the
second operand instead of the sum (a copy mistake, the kind pre-training text is full of). The
pre-trained model therefore splits its mass between the sum and the copy, and GRPO with a
correctness reward on the RL prompts has something real to learn: drop the copy habit. Accuracy
on the held-out pairs says whether what it learned carries beyond the prompts it trained on.

Pre-training runs with stock transformers over fp32 weights (on a GPU under bf16 autocast; it only
makes the starting checkpoint, the numerical contract starts at the RL loop), saves the run's dtype
(bf16 by default), and is cached under the run directory, keyed by its settings.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

SIZE = 20  # operands 0..19, sums 0..38: one token each in the tiny tokenizer


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 1000
    batch: int = 64
    lr: float = 3e-3
    noise: float = 0.5
    seed: int = 0
    device: str = "cpu"
    dtype: str = "bfloat16"  # of the saved checkpoint (training keeps fp32 weights)

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]


def all_pairs() -> list[tuple[int, int]]:
    return [(a, b) for a in range(SIZE) for b in range(SIZE)]


def split(seed: int = 0, held_out: float = 0.3) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(RL pairs, held-out pairs): a fixed shuffle of all SIZE x SIZE pairs."""
    pairs = all_pairs()
    random.Random(seed).shuffle(pairs)
    n = int(len(pairs) * held_out)
    return pairs[n:], pairs[:n]


def prompt(a: int, b: int) -> str:
    return f"{a} + {b} ="


def answer_of(text: str) -> int | None:
    """The completion's answer: its first whitespace-separated word as an integer, else None."""
    words = text.split()
    return int(words[0]) if words and words[0].isascii() and words[0].isdigit() else None  # "²".isdigit()


def correct(text: str, a: int, b: int) -> bool:
    return answer_of(text) == a + b


def reward(text: str, a: int, b: int) -> float:
    """The main job's reward: 1 for the right sum, else 0."""
    return float(correct(text, a, b))


def format_reward(text: str, a: int, b: int) -> float:
    """The fraction of the completion's non-space characters that are digits: a dense reward for
    *random-init* checkpoints (the GPU and multi-rank checks), where correctness is always 0 and
    GRPO's advantages -- and so its updates -- would be zero."""
    chars = [c for c in text if not c.isspace()]
    return sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0


def _examples(prompt_ids: dict, answer_ids: dict, rng: random.Random, noise: float, n: int):
    """``n`` (prompt ids, completion ids), a fraction ``noise`` answering ``b``; ``prompt_ids``
    maps each pair to its tokens, ``answer_ids`` each answer to its tokens + EOS."""
    pairs = list(prompt_ids)
    out = []
    for _ in range(n):
        a, b = pairs[rng.randrange(len(pairs))]
        s = b if rng.random() < noise else a + b  # the corpus's systematic error: copying the second operand
        out.append((prompt_ids[a, b], answer_ids[s]))
    return out


def sft(base: Path, out: Path, cfg: SFTConfig, progress: bool = True) -> Path:
    """Pre-train the stock checkpoint ``base`` on the corpus over all pairs; save it (``cfg.dtype``,
    with the tokenizer) to ``out`` through a temp dir + rename. Cached: returns ``out`` at once
    if it holds a finished run of the same ``cfg``."""
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stamp = out / "sft.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("key") == cfg.key():
        return out
    t0 = time.time()
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).to(cfg.device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    # tokenized once: 400 prompts and 39 answers, not 2 tokenizer calls per example
    prompt_ids = {(a, b): tok(prompt(a, b))["input_ids"] for a, b in all_pairs()}
    answer_ids = {s: tok(f" {s}")["input_ids"] + [tok.eos_token_id] for s in range(2 * SIZE - 1)}
    losses = []
    for _ in tqdm(range(cfg.steps), desc="SFT", disable=not progress):
        ex = _examples(prompt_ids, answer_ids, rng, cfg.noise, cfg.batch)
        width = max(len(p) + len(c) for p, c in ex)
        ids = torch.full((len(ex), width), tok.pad_token_id)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for i, (p, c) in enumerate(ex):
            ids[i, :len(p) + len(c)] = torch.tensor(p + c)
            labels[i, len(p):len(p) + len(c)] = torch.tensor(c)
            mask[i, :len(p) + len(c)] = 1
        ids, mask, labels = (t.to(cfg.device) for t in (ids, mask, labels))
        # on a GPU, bf16 autocast over the fp32 masters (fp32 matmuls made the 0.6B SFT 165 s on an H200)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=str(cfg.device).startswith("cuda")):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.to(getattr(torch, cfg.dtype)).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "sft.json").write_text(json.dumps({"key": cfg.key(), "config": asdict(cfg), "seconds": time.time() - t0,
                                              "loss_first": losses[0], "loss_last": sum(losses[-20:]) / 20}))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out
