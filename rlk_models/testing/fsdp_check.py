"""FSDP2 checks of an rlk checkpoint (``rlk_models.training.fsdp``), one process per rank:

(a) the forward under FSDP2 (bf16 compute over fp32 master weights) gives each rank's token
    log-probs bit for bit as the plain bf16 model (the rollout's weights) does;
(b) gradients are identical run to run;
(c) with ``gradient_divide_factor=1``, W ranks each taking one micro-batch give the gradient one
    rank gets by accumulating the same W micro-batches in order (compare the ``grads_w*.pt`` files
    of a W-rank run and a 1-rank ``--accumulate W`` run).

    torchrun --nproc-per-node 2 -m rlk_models.testing.fsdp_check CKPT --out DIR     # GPUs (NCCL)
    python -m rlk_models.testing.fsdp_check CKPT --out DIR --spawn 2                  # CPU (gloo)
    python -m rlk_models.testing.fsdp_check CKPT --out DIR --spawn 1 --accumulate 2

Rank 0 writes ``DIR/fsdp_check_w{W}.json`` (the checks) and ``DIR/grads_w{W}.pt`` (full fp32
gradients). The micro-batches are fixed variable-length sequences (``micro_batches``).
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist


def micro_batches(vocab: int, count: int, seqs_per_batch: int = 3, seed: int = 0) -> list[list[torch.Tensor]]:
    """``count`` micro-batches of ``seqs_per_batch`` token sequences of lengths 5..40 each."""
    g = torch.Generator().manual_seed(seed)
    return [[torch.randint(0, vocab, (int(torch.randint(5, 41, (1,), generator=g)),), generator=g)
             for _ in range(seqs_per_batch)] for _ in range(count)]


def _packed(seqs: list[torch.Tensor], device) -> tuple[torch.Tensor, torch.Tensor]:
    cu = torch.tensor([0] + torch.tensor([len(s) for s in seqs]).cumsum(0).tolist(), device=device)
    return torch.cat(seqs).to(device), cu


def _grads(model, micro: list[list[torch.Tensor]], device) -> dict[str, torch.Tensor]:
    """Full fp32 gradients of ``-sum(token log-probs)``, the micro-batches accumulated in order."""
    model.zero_grad(set_to_none=True)
    for b in micro:
        loss = -model.ops.token_sum(model.packed_token_logprobs(*_packed(b, device)))
        loss.backward()
    return {n: p.grad.full_tensor().float().cpu() for n, p in model.named_parameters()}


def run(rank: int, world: int, ckpt: str, out: str, accumulate: int = 1, init: str | None = None) -> None:
    from transformers import AutoModelForCausalLM

    import rlk_models  # noqa: F401  (Auto classes)
    from rlk_models.training.fsdp import fully_shard_model

    faulthandler.enable(all_threads=True)  # a native abort prints every thread's Python stack
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    # spawned: rendezvous through the file; torchrun: its environment (rank=None is refused)
    spawned = dict(init_method=init, rank=rank, world_size=world) if init else {}
    dist.init_process_group("nccl" if cuda else "gloo", **spawned)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (world,))
        ref = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).to(device)
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).to(device)
        fully_shard_model(model, mesh)
        batches = micro_batches(ref.config.vocab_size, world * accumulate)
        mine = batches[rank * accumulate:(rank + 1) * accumulate]

        with torch.no_grad():  # (a) FSDP2 bf16-over-fp32 forward == the bf16 model, per micro-batch
            same = all(torch.equal(model.packed_token_logprobs(*_packed(b, device)),
                                   ref.packed_token_logprobs(*_packed(b, device))) for b in mine)
        del ref

        g1, g2 = _grads(model, mine, device), _grads(model, mine, device)
        run_to_run = all(torch.equal(g1[n], g2[n]) for n in g1)
        flags = torch.tensor([int(same), int(run_to_run)], device=device)
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        if rank == 0:
            Path(out).mkdir(parents=True, exist_ok=True)
            torch.save(g1, Path(out) / f"grads_w{world}.pt")
            (Path(out) / f"fsdp_check_w{world}.json").write_text(json.dumps({
                "world": world, "accumulate": accumulate, "device": device.type,
                "forward_equals_bf16_model": bool(flags[0]), "grads_run_to_run": bool(flags[1]),
                "micro_batch_tokens": [sum(len(s) for s in b) for b in batches]}, indent=1))
        # Teardown in a fixed order, every rank together: no rank closes its gloo/NCCL pairs while
        # another still runs, and the sharded model and mesh (which hold the process group) go
        # while the interpreter is whole rather than in its finalization.
        dist.barrier()
        del model, mesh
        gc.collect()
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--accumulate", type=int, default=1, help="micro-batches per rank, accumulated in order")
    ap.add_argument("--spawn", type=int, help="start this many local processes (CPU/gloo) instead of torchrun's")
    a = ap.parse_args()
    if a.spawn:
        import torch.multiprocessing as mp

        with tempfile.TemporaryDirectory() as d:
            mp.spawn(run, args=(a.spawn, a.ckpt, a.out, a.accumulate, f"file://{d}/init"), nprocs=a.spawn,
                     join=True)
    else:
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), a.ckpt, a.out, a.accumulate)


if __name__ == "__main__":
    main()
