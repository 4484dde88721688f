"""Rollout throughput on CPU: the rlk vLLM class vs stock vLLM's Qwen3 on the same tiny
checkpoint (same weights, same prompts, same engine settings; each engine in its own process).

    python benchmarks/e2e_vllm_cpu.py [--prompts 32] [--max-tokens 64] [--out runs/bench]

Stock vLLM on CPU uses its CPU_ATTN backend (head_dim 32/64/128, block sizes in multiples of
32) and may need the AMX tile permission on AMX machines (requested below; harmless elsewhere).
Prints a table and writes JSON next to the checkpoints.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def _engine_run(ckpt: str, mode: str, n_prompts: int, max_tokens: int) -> dict:
    import torch
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from rlk_models import verify

    verify.in_process_env()
    llm = verify.make_llm(ckpt, "bfloat16", 512, block_size=128)  # stock checkpoint -> stock vLLM
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 500, (int(torch.randint(8, 128, (1,), generator=g)),), generator=g).tolist()
               for _ in range(n_prompts)]
    sp = SamplingParams(max_tokens=max_tokens, temperature=1.0, ignore_eos=True, logprobs=0, detokenize=False)
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts[:4]], sp, use_tqdm=False)  # warm-up
    t = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
    dt = time.perf_counter() - t
    gen = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"mode": mode, "seconds": dt, "output_tokens": gen, "prompt_tokens": sum(map(len, prompts)),
            "output_tok_per_s": gen / dt}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", default="runs/bench")
    ap.add_argument("--_engine", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._engine:
        print(json.dumps(_engine_run(args._engine[0], args._engine[1], args.prompts, args.max_tokens)))
        return
    from rlk_models.conversion import convert
    from rlk_models.testing.tiny import make_tiny_hf_checkpoint

    out = Path(args.out)
    hf = out / "qwen3-hf"
    if not (hf / "config.json").exists():
        make_tiny_hf_checkpoint(hf, "qwen3")
    rlk = convert(hf, out / "qwen3-rlk", force=True, progress=False)
    rows = []
    for mode, ckpt in (("stock", hf), ("rlk", rlk)):
        r = subprocess.run([sys.executable, __file__, "--prompts", str(args.prompts), "--max-tokens",
                            str(args.max_tokens), "--_engine", str(ckpt), mode], capture_output=True, text=True)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if not line:
            raise SystemExit(f"{mode} run failed:\n{r.stderr[-3000:]}")
        rows.append(json.loads(line[-1]))
    (out / "e2e_vllm_cpu.json").write_text(json.dumps(rows, indent=2))
    stock = rows[0]["output_tok_per_s"]
    print(f"{'engine':8} {'output tok/s':>12} {'seconds':>8} {'vs stock':>9}")
    for r in rows:
        print(f"{r['mode']:8} {r['output_tok_per_s']:12.1f} {r['seconds']:8.2f} {r['output_tok_per_s'] / stock:8.2f}x")


if __name__ == "__main__":
    main()
