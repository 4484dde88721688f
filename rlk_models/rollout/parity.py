"""Parity between the vLLM class (real vLLM engine, in-process) and the training class: the sweep
behind ``rlk-verify``.

``sweep`` runs engine configurations (mixed-length batches, chunked prefill, one vs many
sequences per step, prefix-cache hits at two block sizes, greedy and temperature-1 sampling,
several ``generate`` calls per engine) and compares every prompt and sampled-token log-prob vLLM
reports with the training class's ``token_logprobs`` on the same tokens: one ``Report`` per
configuration (mismatch_count, max_abs_diff, tokens compared, prefix-cache hits).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .engine import close_llm, in_process_env, make_llm, right_pad

# name -> (engine overrides, sampling, batch size of each generate call on the one engine)
CONFIGS: dict[str, tuple[dict, str, list[int]]] = {
    "batches_1_5_16_greedy": ({}, "greedy", [1, 5, 16]),
    "batches_16_3_temp1": ({}, "temp1", [16, 3]),
    "chunked_prefill_16": ({"max_num_batched_tokens": 16, "max_num_seqs": 4, "enable_chunked_prefill": True},
                           "temp1", [16]),
    "max_num_seqs_1": ({"max_num_seqs": 1}, "temp1", [16]),
    "prefix_cache_block16": ({"enable_prefix_caching": True, "block_size": 16}, "temp1", [16, 16]),
    "prefix_cache_default_block": ({"enable_prefix_caching": True}, "greedy", [16, 16]),
    # vLLM's compilation path (torch.compile of the decoder, ops as rlk::* custom ops; opt-in)
    "compiled": ({"enforce_eager": False, "hf_overrides": {"rlk_compile": True}}, "temp1", [16, 3]),
}
# added on a CUDA machine (where engines run CUDA graphs by default and batches are cheap)
CUDA_CONFIGS: dict[str, tuple[dict, str, list[int]]] = {
    "batches_64_256_temp1": ({"max_num_seqs": 256, "max_num_batched_tokens": 2048}, "temp1", [64, 256]),
    # mid-size steps, where the matmul's launches change most between row counts: 384-token prefill and mixed steps,
    # then decode steps of up to 192 sequences (the Gluon forms' 96- and 192-column tiles serve 129-192 and 321-384 rows
    # at the Qwen3-1.7B and -8B layer shapes)
    "budget_384_decode_192": ({"max_num_seqs": 192, "max_num_batched_tokens": 384, "enable_chunked_prefill": True},
                              "temp1", [192]),
    # larger steps: 768-token prefill and mixed steps, then decode steps of up to 512 sequences (qkv 8B's Gluon
    # 128 x 192 tiles serve 385-512 rows, its 128 x 256 with tail 513-640, its 192 x 192 641-768)
    "budget_768_decode_512": ({"max_num_seqs": 512, "max_num_batched_tokens": 768, "enable_chunked_prefill": True},
                              "temp1", [512]),
    "cuda_graphs_off": ({"enforce_eager": True}, "temp1", [16, 3]),
    # full CUDA graphs of every step, prefill chunks mixed with decodes: a 48-token budget, also the largest
    # capture size (vLLM's default would be 2 x max_num_seqs = 32, and it wants the budget >= max_num_seqs),
    # splits the 1-320-token prompts into chunks that share steps with the 16 requests' decodes
    "full_graphs_mixed": ({"compilation_config": {"cudagraph_mode": "FULL", "max_cudagraph_capture_size": 48},
                           "max_num_seqs": 16, "max_num_batched_tokens": 48, "enable_chunked_prefill": True},
                          "temp1", [16, 3]),
    # compiled, with piecewise CUDA graphs for prefill and mixed steps and full graphs for decode
    "compiled_piecewise_graphs": ({"hf_overrides": {"rlk_compile": True},
                                   "compilation_config": {"cudagraph_mode": "FULL_AND_PIECEWISE"},
                                   "max_num_seqs": 256, "max_num_batched_tokens": 2048}, "temp1", [64, 256]),
}


def configs() -> dict[str, tuple[dict, str, list[int]]]:
    """The sweep's configurations on this machine."""
    return {**CONFIGS, **(CUDA_CONFIGS if torch.cuda.is_available() else {})}


@dataclass
class Report:
    config: str
    mismatch_count: int = 0
    max_abs_diff: float = 0.0
    tokens: int = 0
    cached_tokens: int = 0
    seconds: float = 0.0  # the engine's start, every generate call and the comparisons

    def add(self, got: list[float], want: list[float]) -> None:
        for a, b in zip(got, want, strict=True):
            self.tokens += 1
            self.mismatch_count += int(a != b)
            self.max_abs_diff = max(self.max_abs_diff, abs(a - b))


def mixed_prompts(vocab: int, n: int = 16, seed: int = 0, long_prefix: int = 300) -> list[list[int]]:
    """1..n prompts of mixed lengths, many sharing prefixes (so prefix caching can hit at block
    sizes 16 and 128)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, vocab, (long_prefix + 40,), generator=g).tolist()
    out = [base[:5], base[:40], base[10:27], base[:40] + [7, 8, 9], base[:33], base[:long_prefix],
           base[:long_prefix + 20], base[3:4]]
    while len(out) < n:
        k = int(torch.randint(2, 90, (1,), generator=g))
        out.append(torch.randint(0, vocab, (k,), generator=g).tolist())
    return out[:n]


def sampling_params(kind: str, max_tokens: int, prompt_logprobs: bool):
    from vllm import SamplingParams

    temp = 0.0 if kind == "greedy" else 1.0
    return SamplingParams(max_tokens=max_tokens, temperature=temp, logprobs=0,
                          prompt_logprobs=0 if prompt_logprobs else None, detokenize=False)


def compare(model, prompts: list[list[int]], outputs, report: Report) -> None:
    """Add every reported log-prob of ``outputs`` (vLLM RequestOutputs) to ``report``, against
    the training class's token_logprobs of prompt + completion, all in one padded batch."""
    ids, mask = right_pad([p + list(o.outputs[0].token_ids) for p, o in zip(prompts, outputs)])
    dev = next(model.parameters()).device
    with torch.no_grad():
        lp = model.token_logprobs(ids.to(dev), mask.to(dev)).cpu()
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        got, want = [], []
        if o.prompt_logprobs is not None:
            for j in range(1, len(p)):
                got.append(o.prompt_logprobs[j][p[j]].logprob)
                want.append(lp[i, j - 1].item())
        c = o.outputs[0]
        for k, tok in enumerate(c.token_ids):
            got.append(c.logprobs[k][tok].logprob)
            want.append(lp[i, len(p) + k - 1].item())
        report.add(got, want)
        report.cached_tokens += int(o.num_cached_tokens or 0)


def tensor_parallel_env(tp: int) -> dict:
    """Engine arguments for ``tensor_parallel_size=tp``; for tp > 1 also the process setup vLLM
    needs: worker processes (multiprocessing on), and on CPU one core set per worker unless
    ``VLLM_CPU_OMP_THREADS_BIND`` says otherwise."""
    if tp == 1:
        return {}
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    if not torch.cuda.is_available() and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < tp:
            raise ValueError(f"tensor_parallel_size={tp} on CPU needs a core per worker; this process has "
                             f"{len(cores)} (to share them, name each worker's cores in VLLM_CPU_OMP_THREADS_BIND, "
                             f"e.g. {'|'.join(str(cores[r % len(cores)]) for r in range(tp))!r})")
        per = len(cores) // tp
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            ",".join(map(str, cores[r * per:(r + 1) * per])) for r in range(tp))
    return {"tensor_parallel_size": tp, "distributed_executor_backend": "mp"}


def run_config(ckpt: str, name: str, model, dtype: str = "bfloat16", max_tokens: int = 12, tp: int = 1) -> Report:
    from vllm.inputs import TokensPrompt

    overrides, kind, sizes = configs()[name]
    start = time.perf_counter()
    # token ids in and out: no tokenizer
    llm = make_llm(ckpt, dtype, skip_tokenizer_init=True, **tensor_parallel_env(tp), **overrides)
    try:
        report = Report(name)
        prompts = mixed_prompts(model.config.vocab_size, n=max(16, *sizes))
        for call, size in enumerate(sizes):
            # prompt log-probs force vLLM to skip reading the prefix cache: ask for them on the
            # first call only, so later calls can hit the blocks the first one cached
            sp = sampling_params(kind, max_tokens, prompt_logprobs=(call == 0))
            batch = (prompts if call % 2 == 0 else prompts[::-1])[:size]
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch], sp, use_tqdm=False)
            compare(model, batch, outs, report)
        report.seconds = round(time.perf_counter() - start, 1)
        return report
    finally:
        close_llm(llm)


def iter_sweep(ckpt: str, names: list[str] | None = None, dtype: str = "bfloat16", tp: int = 1) -> Iterator[Report]:
    """The configurations ``names`` (default: all) with the engine at ``tensor_parallel_size=tp``,
    against the TP=1 training class (on the first GPU when there is one): each ``Report`` as soon
    as its configuration has run (an engine per configuration; at TP=2 on a GPU about a minute
    each), so a caller can show it before the next engine starts."""
    from transformers import AutoModelForCausalLM

    import rlk_models  # noqa: F401

    in_process_env()
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=getattr(torch, dtype)).eval()
    if torch.cuda.is_available():
        model = model.cuda()
    for name in names or list(configs()):
        yield run_config(ckpt, name, model, dtype, tp=tp)


def sweep(ckpt: str, names: list[str] | None = None, dtype: str = "bfloat16", tp: int = 1) -> list[Report]:
    """Every ``Report`` of ``iter_sweep``."""
    return list(iter_sweep(ckpt, names, dtype, tp))


