"""The forward-only log-prob pass of an RL run, eager against CUDA graphs (``token_logprobs(..., cuda_graphs=True)``),
on a random-init Qwen3-shaped checkpoint (bf16, Triton backend): ``--steps`` micro-batches of ``--seqs`` sequences,
each a ``--prompt``-token prompt and a response of a random length in ``--response`` (lo,hi), right-padded -- the
old-policy / reference pass of a GRPO step, whose shapes change every micro-batch. Both sides run the same batches
in the same order; the graphed side's time includes its captures (a new padded size captures its graph on first
sight). Per side: tokens/s over the run (wall time, synchronized), and after the run the same batches again (every
graph captured: the steady state). Every graphed log-prob is compared with the eager one: ``mismatch`` counts those
that differ (the contract: 0). ``--train``: the policy's pass instead, with gradients -- each micro-batch's weighted
log-prob sum backpropagated, the gradients accumulated over the run as in one optimizer step -- by training graphs
(forward and backward, ``max_train_graphs`` kept) against eager; ``grad_mismatch`` counts the accumulated gradient
entries that differ (the graphs give the padded batches' gradients). ``--scored``: the graphed pass also with
``score_mask`` over the response tokens (what an RL step scores; the head skips the prompt's rows), rows
``graphs_scored`` / ``graphs_scored_again``, its log-probs compared with the eager ones there (its gradients are
another padded batch's: not compared). Results: ``$OUT/logprob_graphs_<shape>.json`` (``..._train.json``).

    python benchmarks/logprob_graphs.py --shape 1.7b --seqs 1 --prompt 256 --response 512,1024
    python benchmarks/logprob_graphs.py --shape 8b --layers 8 --seqs 8
    python benchmarks/logprob_graphs.py --shape 1.7b --seqs 1 --train --steps 12
    python benchmarks/logprob_graphs.py --shape small --seqs 8 --prompt 512 --response 128,512 --train --scored
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import info, log, save  # noqa: E402
from vllm_cuda import COMMON, SHAPES  # noqa: E402


def batches(a, vocab: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(ids, mask, response [B, S-1]: the positions whose next token is a response token) per micro-batch."""
    g = torch.Generator().manual_seed(0)
    lo, hi = map(int, a.response.split(","))
    out = []
    for _ in range(a.steps):
        lengths = [a.prompt + int(torch.randint(lo, hi + 1, (1,), generator=g)) for _ in range(a.seqs)]
        ids = torch.randint(0, vocab, (a.seqs, max(lengths)), generator=g)
        mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
        response = mask[:, 1:].bool() & (torch.arange(1, max(lengths)) >= a.prompt)
        out.append((ids.cuda(), mask.cuda(), response.cuda()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="1.7b", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=0, help="override the shape's layer count (0: keep)")
    ap.add_argument("--seqs", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--response", default="512,1024", help="lo,hi: each response's length, uniform")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--train", action="store_true", help="the pass with gradients and a backward (training graphs)")
    ap.add_argument("--scored", action="store_true", help="also the graphed pass with score_mask over the responses")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM

    import rlk_models  # noqa: F401
    from rlk_models.conversion import convert
    from rlk_models.testing.tiny import make_sized_hf_checkpoint

    shape = {**SHAPES[a.shape], **COMMON}
    if a.layers:
        shape["num_hidden_layers"] = a.layers
    with tempfile.TemporaryDirectory() as tmp:
        with torch.device("cuda"):
            hf = make_sized_hf_checkpoint(Path(tmp) / "hf", "qwen3", shape)
        ckpt = convert(hf, Path(tmp) / "rlk", rlk_backend="triton", force=True, progress=False)
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).cuda().eval()
    data = batches(a, model.config.vocab_size)
    tokens = sum(int(m.sum()) for _, m, _ in data)
    res = {"info": info(), "args": vars(a), "layers": shape["num_hidden_layers"], "tokens": tokens,
           "scored_tokens": sum(int(r.sum()) for _, _, r in data)}

    weights = [torch.randn(ids.shape[0], ids.shape[1] - 1, device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(i)) for i, (ids, *_) in enumerate(data)]

    def run(graphs: bool, scored: bool = False) -> tuple[float, list[torch.Tensor], list]:
        outs = []
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.set_grad_enabled(a.train):
            for (ids, mask, response), w in zip(data, weights):
                logp = model.token_logprobs(ids, mask, cuda_graphs=graphs, score_mask=response if scored else None)
                if a.train:
                    (logp * w).sum().backward()
                outs.append(logp.detach())
        torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        grads = [p.grad for p in model.parameters()] if a.train else []
        model.zero_grad(set_to_none=True)
        return secs, outs, grads

    run(False)  # the kernels compile for the eager sizes
    torch.cuda.reset_peak_memory_stats()
    sides = [("eager", False), ("graphs", True), ("eager_again", False), ("graphs_again", True)]
    if a.scored:
        sides += [("graphs_scored", True), ("graphs_scored_again", True)]
    for label, graphs in sides:
        scored = label.startswith("graphs_scored")
        if label == "graphs_scored":
            model.logprob_graphs.clear()  # its first run captures its own graphs, as "graphs" did
        secs, outs, grads = run(graphs, scored)
        if label == "eager":
            want, want_grads = outs, grads
        row = res[label] = {"s": round(secs, 4), "tok_per_s": round(tokens / secs),
                            "peak_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)}
        torch.cuda.reset_peak_memory_stats()
        if scored:
            row["mismatch"] = sum(int((o != w)[r].sum()) + int((o[~r] != 0).sum())
                                  for o, w, (_, _, r) in zip(outs, want, data))
        elif graphs:
            row["mismatch"] = sum(int((o != w).sum()) for o, w in zip(outs, want))
            if a.train:
                row["grad_mismatch"] = sum(int((x != y).sum()) for x, y in zip(grads, want_grads))
                row["grad_entries"] = sum(x.numel() for x in want_grads)
        if graphs:
            held = model.logprob_graphs.train_graphs if a.train else model.logprob_graphs.graphs
            row["graphs_held"] = len(held)
            row["captures_so_far"] = model.logprob_graphs.captures
        log(f"{label:12} {row}")
    res["speedup_first_run"] = round(res["eager"]["s"] / res["graphs"]["s"], 3)
    res["speedup_steady"] = round(res["eager_again"]["s"] / res["graphs_again"]["s"], 3)
    log(f"graphs / eager tokens/s: first run (captures included) {res['speedup_first_run']}x, "
        f"steady {res['speedup_steady']}x; {res['graphs']['captures_so_far']} captures for {a.steps} micro-batches")
    if a.scored:
        res["scored_speedup_steady"] = round(res["graphs_again"]["s"] / res["graphs_scored_again"]["s"], 3)
        log(f"graphs with score_mask / graphs: steady {res['scored_speedup_steady']}x "
            f"({res['scored_tokens']} of {tokens} tokens scored)")
    os.makedirs(a.out, exist_ok=True)
    os.environ["OUT"] = a.out
    save(f"logprob_graphs_{a.shape}" + "_train" * a.train, res)


if __name__ == "__main__":
    main()
