"""The training class's own Python per forward, on any CPU: a forward-only ``token_logprobs`` of one sequence at the
Qwen3-1.7B widths (a few layers, a small vocab) with the triton backend under ``TRITON_INTERPRET=1`` and every
kernel launch replaced by a no-op, so what is timed is the host work around the launches (the ops' wrappers and
checks, ``mm``'s launch decision, allocations, autograd) -- the part of a small step's host time that is ours
(benchmarks/triton/host_time.py times the whole on a GPU). The embedding's gather runs for real on the CPU (~0.7 ms
at 1,024 tokens). Prints the fastest and the median of ``--calls`` calls; ``--profile``: cProfile's heaviest
functions. Compare two trees by running it under each (``PYTHONPATH=OLD_TREE``), alternately: a loaded machine's
timings move by tens of percent.

    python benchmarks/host_python_cpu.py [--layers 4] [--tokens 1024] [--calls 60] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    import triton.runtime.interpreter as interpreter
    from transformers import AutoModelForCausalLM

    import rlk_models  # noqa: F401  (registers the classes)
    from rlk_models.conversion import convert
    from rlk_models.testing.tiny import make_sized_hf_checkpoint

    cfg = dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=args.layers, num_attention_heads=16,
               num_key_value_heads=8, tie_word_embeddings=True, head_dim=128, vocab_size=4096,
               max_position_embeddings=4096, rms_norm_eps=1e-6,
               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    with tempfile.TemporaryDirectory() as tmp:
        hf = make_sized_hf_checkpoint(Path(tmp) / "hf", "qwen3", cfg)
        rlk = convert(hf, Path(tmp) / "rlk", rlk_backend="triton", force=True, progress=False)
        model = AutoModelForCausalLM.from_pretrained(rlk, dtype=torch.bfloat16)
    interpreter.InterpretedFunction.run = lambda self, *a, **k: None  # every launch a no-op
    ids = torch.randint(0, cfg["vocab_size"], (1, args.tokens))

    def forward():
        with torch.no_grad():
            model.token_logprobs(ids)

    forward()
    times = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        forward()
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"forward-only token_logprobs, {args.layers} layers, {args.tokens} tokens, launches stubbed: fastest "
          f"{times[0] * 1e3:.2f} ms, median {times[len(times) // 2] * 1e3:.2f} ms a call", flush=True)
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            forward()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
