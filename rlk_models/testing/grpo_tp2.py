"""GRPO on two (or more) ranks, end to end: rollout with the rlk vLLM class at
``tensor_parallel_size=W``, training under FSDP2 (each rank takes 1/W of the sampled sequences),
weight sync from the FSDP shards into the engine, and the bitwise check before every update.

This is the colocated layout RL frameworks use (TRL's colocate mode, verl's hybrid engine): each
rank holds one TP shard of the engine (vLLM's ``external_launcher``: the engine's TP workers *are*
the torchrun ranks) and one FSDP shard of the trainer, on the same device. Per step:

  1. every rank samples the same groups (same seed; checked across ranks) for additions of
     ``rlk_models.training.arith``, scored by its dense ``format_reward`` (the checkpoint is
     random-init: correctness would be 0 everywhere and the update empty);
  2. each rank computes ``token_logprobs`` of its sequences with the FSDP2 model (bf16 compute
     over fp32 master weights) and compares them with the TP=W rollout's log-probs -- the counts
     are summed over ranks: a TP=W rollout equal to the TP=1-per-rank trainer, bit for bit;
  3. PPO-clipped surrogate (``rlk_models.cli.grpo.sequence_losses``), each rank's share scaled so
     that the SUM reduce-scatter gives the batch mean; AdamW on the fp32 shards;
  4. the new weights are gathered (``full_tensor``), cast to the engine's dtype and pushed into the
     local engine shard (``rlk_models.rollout.sync.push_weights``).
A last rollout after the final sync is checked the same way (forward only), so the sync itself
is covered. Rank 0 writes ``OUT/grpo_tp2.json`` and prints one line per step.

    torchrun --nproc-per-node 2 -m rlk_models.testing.grpo_tp2 CKPT --out DIR      # 2 GPUs (NCCL)
    VLLM_CPU_OMP_THREADS_BIND='0|1' torchrun --nproc-per-node 2 -m rlk_models.testing.grpo_tp2 CKPT --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch
import torch.distributed as dist


def main(argv: list[str] | None = None) -> None:
    from rlk_models.rollout.engine import engine_graph_options, in_process_env

    in_process_env()  # the engine core in this process: each rank drives its own TP shard
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM

    import rlk_models  # noqa: F401
    from rlk_models.cli.grpo import GRPOConfig, ratio_stats, rollout, rollout_params, sequence_losses
    from rlk_models.rollout.sync import push_weights
    from rlk_models.training import arith
    from rlk_models.training.fsdp import fully_shard_model

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    cfg = GRPOConfig(steps=a.steps, prompts_per_step=a.prompts_per_step, group_size=a.group_size,
                     max_new_tokens=a.max_new_tokens, lr=a.lr)
    t0 = time.perf_counter()
    # the engine first: external_launcher makes the default process group from torchrun's variables
    llm = LLM(model=a.ckpt, dtype="bfloat16", tensor_parallel_size=world,
              distributed_executor_backend="external_launcher", logprobs_mode="raw_logits", seed=cfg.seed,
              max_model_len=256, gpu_memory_utilization=0.3,
              max_num_seqs=cfg.prompts_per_step * cfg.group_size, **({} if cuda else {"block_size": 32}),
              **engine_graph_options(True))
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (world,))
    tok = AutoTokenizer.from_pretrained(a.ckpt)
    model = AutoModelForCausalLM.from_pretrained(a.ckpt, dtype=torch.float32).to(device)
    fully_shard_model(model, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    sp = rollout_params(cfg)
    pool, rng = arith.split()[0], random.Random(cfg.seed + 1)
    setup_s = time.perf_counter() - t0

    def reduce(x: float, op) -> float:
        t = torch.tensor([x], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=op)
        return float(t)

    rows = []
    before = {n: p.full_tensor().to(torch.bfloat16).cpu() for n, p in model.named_parameters()}
    for step in range(cfg.steps + 1):  # the last pass: rollout + check only, after the final sync
        t = time.perf_counter()
        ro = rollout(llm, tok, sp, [pool[rng.randrange(len(pool))] for _ in range(cfg.prompts_per_step)], cfg,
                     arith.format_reward)  # random-init checkpoints: correctness would give no signal
        same = torch.tensor([hash(tuple(ro.ids.flatten().tolist())) % (1 << 62)], device=device)
        everyone = [torch.zeros_like(same) for _ in range(world)]
        dist.all_gather(everyone, same)
        if any(int(x) != int(same) for x in everyone):
            raise RuntimeError("ranks sampled different rollouts (the engine's seed must be the same on every rank)")
        mine = torch.arange(rank, ro.ids.shape[0], world)
        ids, mask, comp, old = (x[mine].to(device) for x in (ro.ids, ro.mask, ro.comp, ro.old))
        lp = model.token_logprobs(ids, mask)
        diff = (lp.detach() - old)[comp]
        row = {"step": step, "world": world, "tokens": int(reduce(comp.sum().item(), dist.ReduceOp.SUM)),
               "mismatch_count": int(reduce(int((diff != 0).sum()), dist.ReduceOp.SUM)),
               "max_abs_diff": reduce(float(diff.abs().max()) if diff.numel() else 0.0, dist.ReduceOp.MAX),
               "reward_mean": float(ro.rewards.mean())}
        if step < cfg.steps:
            adv = ro.adv[mine, None].to(device)
            # this rank's share of the batch mean: SUM over ranks (gradient_divide_factor=1) = the mean
            loss = sequence_losses(lp, old, comp, adv, cfg).sum() / ro.ids.shape[0]
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            row.update(ratio_stats(lp.detach(), old, comp, cfg), loss=reduce(float(loss.detach()), dist.ReduceOp.SUM))
            full = [(n, p.full_tensor().to(torch.bfloat16).cpu()) for n, p in model.named_parameters()]  # collective
            row["pushed"] = push_weights(llm, full)
            row["changed"] = sum(not torch.equal(t, before[n]) for n, t in full)  # the sync moved real bits
            before = dict(full)
        row["seconds"] = round(time.perf_counter() - t, 2)
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
    if rank == 0:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / f"grpo_tp{world}.json").write_text(json.dumps(
            {"device": device.type, "world": world, "setup_s": round(setup_s, 1), "steps": rows}, indent=1))
    dist.barrier()


if __name__ == "__main__":
    main()
