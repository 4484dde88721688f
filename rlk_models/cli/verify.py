"""Parity between the vLLM class (real vLLM engine, in-process) and the training class.

``rlk-verify DIR`` loads an rlk checkpoint in both, runs a sweep of engine configurations
(mixed-length batches, chunked prefill, one vs many sequences per step, prefix-cache hits at
two block sizes, greedy and temperature-1 sampling, several ``generate`` calls per engine),
compares every prompt and sampled-token log-prob vLLM reports with the training class's
``token_logprobs`` on the same tokens, prints one line per configuration (mismatch_count,
max_abs_diff, tokens compared, prefix-cache hits) and exits non-zero on any mismatch.
``--tensor-parallel-size 2`` runs every engine at TP=2 against the same TP=1 training class.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from ..rollout.parity import CUDA_CONFIGS, configs, iter_sweep
from .common import add_imports, add_verbose, checkpoint_dir, import_modules, one_line_errors


@one_line_errors("rlk-verify")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rlk-verify", description=__doc__.split("\n\n")[1].replace("\n", " "))
    ap.add_argument("checkpoint", help="rlk checkpoint directory")
    ap.add_argument("--configs", default=",".join(configs()), help=f"comma-separated subset of {list(configs())}")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--tensor-parallel-size", "--tp", type=int, default=1, choices=[1, 2, 4, 8],
                    help="the engine's tensor_parallel_size (the training class stays at TP=1: that is the check)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per configuration")
    add_imports(ap)
    add_verbose(ap)
    args = ap.parse_args(argv)
    import_modules(args)
    names = [c for c in args.configs.split(",") if c]
    available = configs()
    unknown = [c for c in names if c not in available]
    cuda_only = [c for c in unknown if c in CUDA_CONFIGS]
    if cuda_only:
        ap.error(f"configuration(s) {cuda_only} need a CUDA GPU (their step sizes pick the GPU kernels' launches), "
                 f"and this machine has none; here choose from {list(available)}")
    if unknown:
        ap.error(f"unknown configuration(s) {unknown}; choose from {list(available)}")
    checkpoint_dir(args.checkpoint, rlk=True)
    if not args.json:
        print(f"{'configuration':28} {'mismatch_count':>14} {'max_abs_diff':>12} {'tokens':>7} {'cached':>7} "
              f"{'seconds':>7}", flush=True)
    reports = []
    # one line per configuration as soon as it has run (an engine each: a long sweep shows progress)
    for r in iter_sweep(args.checkpoint, names, args.dtype, tp=args.tensor_parallel_size):
        reports.append(r)
        if args.json:
            print(json.dumps(asdict(r)), flush=True)
        else:
            print(f"{r.config:28} {r.mismatch_count:>14} {r.max_abs_diff:>12.3g} {r.tokens:>7} {r.cached_tokens:>7} "
                  f"{r.seconds:>7.1f}", flush=True)
    bad = sum(r.mismatch_count for r in reports)
    print("OK: bitwise equal in every configuration" if bad == 0 else f"FAILED: {bad} mismatching log-probs",
          file=sys.stderr)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
