"""Parity between the vLLM class (real vLLM engine, in-process) and the training class.

``rlk-verify DIR`` loads an rlk checkpoint in both, runs a sweep of engine configurations
(mixed-length batches, chunked prefill, one vs many sequences per step, prefix-cache hits at
two block sizes, greedy and temperature-1 sampling, several ``generate`` calls per engine),
compares every prompt and sampled-token log-prob vLLM reports with the training class's
``token_logprobs`` on the same tokens, prints one line per configuration (mismatch_count,
max_abs_diff, tokens compared, prefix-cache hits) and exits non-zero on any mismatch.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
from dataclasses import asdict, dataclass

import torch

# name -> (engine overrides, sampling, batch size of each generate call on the one engine)
CONFIGS: dict[str, tuple[dict, str, list[int]]] = {
    "batches_1_5_16_greedy": ({}, "greedy", [1, 5, 16]),
    "batches_16_3_temp1": ({}, "temp1", [16, 3]),
    "chunked_prefill_16": ({"max_num_batched_tokens": 16, "max_num_seqs": 4, "enable_chunked_prefill": True},
                           "temp1", [16]),
    "max_num_seqs_1": ({"max_num_seqs": 1}, "temp1", [16]),
    "prefix_cache_block16": ({"enable_prefix_caching": True, "block_size": 16}, "temp1", [16, 16]),
    "prefix_cache_default_block": ({"enable_prefix_caching": True}, "greedy", [16, 16]),
}


@dataclass
class Report:
    config: str
    mismatch_count: int = 0
    max_abs_diff: float = 0.0
    tokens: int = 0
    cached_tokens: int = 0

    def add(self, got: list[float], want: list[float]) -> None:
        for a, b in zip(got, want, strict=True):
            self.tokens += 1
            self.mismatch_count += int(a != b)
            self.max_abs_diff = max(self.max_abs_diff, abs(a - b))


def in_process_env() -> None:
    """vLLM in this process (fast start, no pickling) with a small CPU KV cache."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def is_rlk_checkpoint(ckpt) -> bool:
    from pathlib import Path

    return json.loads((Path(ckpt) / "config.json").read_text()).get("model_type", "").startswith("rlk_")


def amx_permission() -> None:
    """Stock vLLM's CPU attention can die with SIGILL on AMX machines unless the process has
    asked for the tile-data permission (arch_prctl; harmless elsewhere)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18)  # ARCH_REQ_XCOMP_PERM, XTILEDATA
    except (OSError, AttributeError):
        pass


def make_llm(ckpt: str, dtype: str = "bfloat16", max_model_len: int = 512, **overrides):
    """An engine for an rlk checkpoint (``logprobs_mode="raw_logits"``) or, for a stock
    checkpoint, stock vLLM with its default ``raw_logprobs``. ``overrides`` win."""
    from vllm import LLM

    rlk = is_rlk_checkpoint(ckpt)
    if not rlk:
        amx_permission()
    kw = dict(model=str(ckpt), dtype=dtype, max_model_len=max_model_len, enforce_eager=True,
              logprobs_mode="raw_logits" if rlk else "raw_logprobs", seed=0,
              max_num_batched_tokens=max_model_len, enable_prefix_caching=False)
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


def right_pad(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) [B, max len] for token lists, right-padded with 0."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s, dtype=torch.long), 1
    return ids, mask


def compare(model, prompts: list[list[int]], outputs, report: Report) -> None:
    """Add every reported log-prob of ``outputs`` (vLLM RequestOutputs) to ``report``, against
    the training class's token_logprobs of prompt + completion, all in one padded batch."""
    ids, mask = right_pad([p + list(o.outputs[0].token_ids) for p, o in zip(prompts, outputs)])
    with torch.no_grad():
        lp = model.token_logprobs(ids, mask)
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


def run_config(ckpt: str, name: str, model, dtype: str = "bfloat16", max_tokens: int = 12) -> Report:
    from vllm.inputs import TokensPrompt

    overrides, kind, sizes = CONFIGS[name]
    llm = make_llm(ckpt, dtype, **overrides)
    try:
        report = Report(name)
        prompts = mixed_prompts(model.config.vocab_size)
        for call, size in enumerate(sizes):
            # prompt log-probs force vLLM to skip reading the prefix cache: ask for them on the
            # first call only, so later calls can hit the blocks the first one cached
            sp = sampling_params(kind, max_tokens, prompt_logprobs=(call == 0))
            batch = (prompts if call % 2 == 0 else prompts[::-1])[:size]
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch], sp, use_tqdm=False)
            compare(model, batch, outs, report)
        return report
    finally:
        close_llm(llm)


def sweep(ckpt: str, configs: list[str] | None = None, dtype: str = "bfloat16") -> list[Report]:
    import rlk_models  # noqa: F401
    from transformers import AutoModelForCausalLM

    in_process_env()
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=getattr(torch, dtype)).eval()
    return [run_config(ckpt, name, model, dtype) for name in (configs or list(CONFIGS))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rlk-verify", description=__doc__.split("\n\n")[1].replace("\n", " "))
    ap.add_argument("checkpoint", help="rlk checkpoint directory")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {list(CONFIGS)}")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--json", action="store_true", help="print one JSON object per configuration")
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                    help="import MODULE first (e.g. one that registers an out-of-tree op backend)")
    args = ap.parse_args(argv)
    for mod in args.imports:
        importlib.import_module(mod)
    names = [c for c in args.configs.split(",") if c]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        ap.error(f"unknown configuration(s) {unknown}; choose from {list(CONFIGS)}")
    reports = sweep(args.checkpoint, names, args.dtype)
    if args.json:
        for r in reports:
            print(json.dumps(asdict(r)))
    else:
        print(f"{'configuration':28} {'mismatch_count':>14} {'max_abs_diff':>12} {'tokens':>7} {'cached':>7}")
        for r in reports:
            print(f"{r.config:28} {r.mismatch_count:>14} {r.max_abs_diff:>12.3g} {r.tokens:>7} {r.cached_tokens:>7}")
    bad = sum(r.mismatch_count for r in reports)
    print("OK: bitwise equal in every configuration" if bad == 0 else f"FAILED: {bad} mismatching log-probs",
          file=sys.stderr)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
