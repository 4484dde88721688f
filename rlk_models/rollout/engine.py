"""The vLLM engine as this package drives it: build one for an rlk checkpoint (or stock vLLM for a
transformers checkpoint), tear it down, run it in-process, pad token lists for the training class.
Used by the parity sweep, the GRPO job, the bisector and the demo."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import torch


def in_process_env() -> None:
    """vLLM in this process (fast start, no pickling) with a small CPU KV cache; vLLM's log lines go
    to stderr (stdout stays the program's: tables, JSON)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")


def is_rlk_checkpoint(ckpt) -> bool:
    return json.loads((Path(ckpt) / "config.json").read_text()).get("model_type", "").startswith("rlk_")


def amx_permission() -> None:
    """Stock vLLM's CPU attention can die with SIGILL on AMX machines unless the process has
    asked for the tile-data permission (arch_prctl; harmless elsewhere)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18)  # ARCH_REQ_XCOMP_PERM, XTILEDATA
    except (OSError, AttributeError):
        pass


# Full graphs of every step of up to 2048 tokens. vLLM's default capture range ends at 512 tokens, and an RL
# rollout's mixed steps (a few new prompts' prefills beside the running decodes) pass it often; above it a step runs
# eagerly, where our Python-launched kernels are host-bound. H200, Qwen3-1.7B shape, 384 requests of 256-token
# prompts through 256 slots (session 20, docs/benchmarks.md): 16,653 against 14,175 tok/s with the 512 default
# (0.986x against 0.840x stock vLLM), 0 of 82,932 log-probs differing from training in both.
RLK_CUDA_GRAPHS = {"cudagraph_mode": "FULL", "max_cudagraph_capture_size": 2048}


def engine_graph_options(rlk: bool, cuda_graphs: bool | None = None) -> dict:
    """How an engine runs its steps. CPU: eagerly. CUDA: with CUDA graphs (``cuda_graphs=False``:
    eagerly) -- for an rlk checkpoint, full graphs of every step up to 2048 tokens (vLLM caps that at
    ``max_num_batched_tokens``), prefill and mixed prefill/decode steps included (``RLK_CUDA_GRAPHS``,
    ``cudagraph_mode="FULL"``: on the
    H200 bitwise equal to training, and against ``FULL_DECODE_ONLY`` faster at 1.7B in every figure
    and at 8B in throughput (16,463 vs 15,715 tok/s), batch-1 latency (5.19 vs 5.76 ms) and first
    token (8.9 vs 76.7 ms), docs/benchmarks.md, sessions 12-13). vLLM's default piecewise graphs
    need the compiled model, which is opt-in for rlk checkpoints -- ``hf_overrides={"rlk_compile":
    True}``, then ``cudagraph_mode="FULL_AND_PIECEWISE"``. For a stock checkpoint, vLLM's defaults."""
    graphs = torch.cuda.is_available() if cuda_graphs is None else cuda_graphs
    if not graphs:
        return {"enforce_eager": True}
    return {"enforce_eager": False, **({"compilation_config": dict(RLK_CUDA_GRAPHS)} if rlk else {})}


def make_llm(ckpt: str, dtype: str = "bfloat16", max_model_len: int = 512, cuda_graphs: bool | None = None,
             **overrides):
    """An engine for an rlk checkpoint (``logprobs_mode="raw_logits"``) or, for a stock
    checkpoint, stock vLLM with its default ``raw_logprobs``; CUDA graphs as
    ``engine_graph_options``. ``overrides`` win."""
    from vllm import LLM

    rlk = is_rlk_checkpoint(ckpt)
    if not rlk:
        amx_permission()
    kw = dict(model=str(ckpt), dtype=dtype, max_model_len=max_model_len,
              logprobs_mode="raw_logits" if rlk else "raw_logprobs", seed=0,
              max_num_batched_tokens=max_model_len, enable_prefix_caching=False,
              **engine_graph_options(rlk, cuda_graphs))
    kw.update(overrides)
    return LLM(**kw)


def close_llm(llm) -> None:
    """Tear an in-process engine down so that another can start in this process."""
    from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

    core = getattr(llm.llm_engine, "engine_core", None)
    if hasattr(core, "shutdown"):
        core.shutdown()
    del llm
    gc.collect()
    destroy_model_parallel()
    destroy_distributed_environment()


def right_pad(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) [B, max len] for token lists, right-padded with 0."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s, dtype=torch.long), 1
    return ids, mask
