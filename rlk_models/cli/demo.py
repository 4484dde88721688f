"""``rlk-demo``: the end-to-end walk-through on a tiny generated checkpoint (CPU, seconds).

1. make a stock transformers Qwen3 (or Llama) checkpoint with a locally trained tokenizer,
2. convert it to an rlk checkpoint (``rlk-convert``) and load it with ``AutoModelForCausalLM``,
3. print the per-token log-probs of a prompt,
4. print an invariance report: the same sequences' log-probs alone, in padded batches of
   other sequences at every position, packed, with 1 and 2 threads, run twice, and as reported
   by a real vLLM engine running the rlk vLLM class (prompt and sampled tokens) -- mismatch
   count and max abs diff against the training class for each, plus the distance to stock
   transformers.
Exits non-zero if any bitwise check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..families import FAMILIES
from .common import add_verbose, one_line_errors


def _prompts(tok) -> list[torch.Tensor]:
    texts = ["12 + 30 = 42", "the model is a policy", "seven plus two equals nine",
             "train the policy with the reward of each step", "5 + 5 = 10", "roll out one batch"]
    return [torch.tensor(tok(t)["input_ids"]) for t in texts]


def _compare(got: list[torch.Tensor], want: list[torch.Tensor]) -> tuple[int, float, int]:
    g, w = torch.cat(got), torch.cat(want)
    return int((g != w).sum()), float((g - w).abs().max()), g.numel()


@one_line_errors("rlk-demo")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rlk-demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/demo", help="where the checkpoints go (default: runs/demo)")
    ap.add_argument("--family", choices=sorted(FAMILIES), default="qwen3")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    add_verbose(ap)
    args = ap.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rlk_models  # noqa: F401

    from ..conversion import convert
    from ..rollout import engine, parity
    from ..testing.tiny import make_tiny_hf_checkpoint

    out = Path(args.out)
    dtype = getattr(torch, args.dtype)
    hf_dir = make_tiny_hf_checkpoint(out / f"{args.family}-hf", args.family, dtype=dtype) \
        if not (out / f"{args.family}-hf" / "config.json").exists() else out / f"{args.family}-hf"
    rlk_dir = convert(hf_dir, out / f"{args.family}-rlk", force=True)
    print(f"stock checkpoint: {hf_dir}\nrlk checkpoint:   {rlk_dir}")
    tok = AutoTokenizer.from_pretrained(rlk_dir)
    model = AutoModelForCausalLM.from_pretrained(rlk_dir, dtype=dtype).eval()
    print(f"loaded {type(model).__name__} ({args.dtype}, backend={model.config.rlk_backend})\n")

    seqs = _prompts(tok)
    with torch.no_grad():
        alone = [model.token_logprobs(s[None])[0] for s in seqs]
        first = seqs[3]
        print(f"per-token log-probs of {tok.decode(first)!r}:")
        for i, lp in enumerate(alone[3].tolist()):
            print(f"  {tok.decode(first[i + 1:i + 2])!r:>12}  {lp: .6f}")

        rows = []
        n = len(seqs)
        for shift in tqdm(range(n), desc="invariance checks", leave=False):
            order = seqs[shift:] + seqs[:shift]  # every sequence at every batch position
            ids, mask = engine.right_pad([x.tolist() for x in order])
            lp = model.token_logprobs(ids, mask)
            got = [lp[i, :len(order[i]) - 1] for i in range(n)]
            rows.append((f"padded batch, rotation {shift}", *_compare(got, alone[shift:] + alone[:shift])))
        cu = torch.tensor([0] + [len(x) for x in seqs]).cumsum(0)
        packed = model.packed_token_logprobs(torch.cat(seqs), cu)
        rows.append(("packed batch", *_compare([packed[a:b - 1] for a, b in zip(cu[:-1], cu[1:])], alone)))
        for threads in (1, 2):
            torch.set_num_threads(threads)
            singles = [model.token_logprobs(s[None])[0] for s in seqs]
            rows.append((f"{threads} thread(s), alone", *_compare(singles, alone)))
        rows.append(("repeat run", *_compare([model.token_logprobs(s[None])[0] for s in seqs], alone)))

        stock = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype).eval()
        ref = [stock(s[None]).logits[0, :-1].float().log_softmax(-1).gather(1, s[1:, None])[:, 0] for s in seqs]
        _, acc_diff, acc_n = _compare(alone, ref)

    engine.in_process_env()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    vllm_report = parity.sweep(str(rlk_dir), ["batches_16_3_temp1", "chunked_prefill_16"], args.dtype)
    for r in vllm_report:
        rows.append((f"vLLM engine: {r.config}", r.mismatch_count, r.max_abs_diff, r.tokens))

    print("\ninvariance report (bitwise, against the training class):")
    print(f"  {'configuration':34} {'mismatch_count':>14} {'max_abs_diff':>12} {'tokens':>7}")
    for name, mism, diff, count in rows:
        print(f"  {name:34} {mism:>14} {diff:>12.3g} {count:>7}")
    print(f"\naccuracy: max |logp_rlk - logp_transformers| = {acc_diff:.3g} over {acc_n} tokens "
          f"({args.dtype}; different rounding points, not a contract)")
    bad = sum(r[1] for r in rows)
    print("\nresult:", "OK -- every configuration bitwise equal" if bad == 0 else f"FAILED -- {bad} mismatches")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
