"""Tensor-parallel invariance of the canonical reductions: a row-parallel linear and the
vocab-parallel log-prob head computed as k shards (k in 1, 2, 4, 8) -- simulated in one
process, and for real with torch.distributed (gloo) in 2 and 4 processes -- give the TP=1
bits (torch.equal)."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st

from rlk_models.ops import get_backend
from rlk_models.ops.canonical import padded_vocab, vocab_shard

ops = get_backend("reference")
TP = [1, 2, 4, 8]


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def row_parallel(x, w, b, k, dtype):
    kk = x.shape[-1] // k
    parts = torch.stack([ops.shard_partial(x[:, r * kk:(r + 1) * kk], w[:, r * kk:(r + 1) * kk], k) for r in range(k)])
    return ops.combine_partials(parts, b, dtype)


def head_parallel(h, w_pad, targets, vocab, k):
    stats = [ops.shard_stats(h, w_pad[a:b], (a, b), vocab, targets, with_entropy=True, keep_logits=True)
             for a, b in (vocab_shard(vocab, r, k) for r in range(k))]
    m, s, e, tgt = (torch.stack([st_[i] for st_ in stats]) for i in range(4))
    lse, mean_l, target = ops.combine_shards(m, s, e, tgt)
    full = torch.cat([st_.logits for st_ in stats], -1) - lse[:, None]
    return target - lse, lse - mean_l, full


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 20), k8=st.sampled_from([1, 3, 8, 12, 31]), n=st.sampled_from([1, 7, 64]),
       bias=st.booleans(), dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 999))
def test_row_parallel_linear_equals_tp1(m, k8, n, bias, dtype, seed):
    x, w = rand(m, 8 * k8, dtype=dtype, seed=seed), rand(n, 8 * k8, dtype=dtype, seed=seed + 1)
    b = rand(n, dtype=dtype, seed=seed + 2) if bias else None
    want = ops.linear(x, w, b, row_parallel=True)
    for k in TP:
        assert torch.equal(row_parallel(x, w, b, k, dtype), want), k
    kk = 4 * k8  # TP=2 as vLLM runs it: one fp32 partial per rank, all-reduced (either order)
    p0, p1 = (ops.shard_partial(x[:, r * kk:(r + 1) * kk], w[:, r * kk:(r + 1) * kk], 2) for r in range(2))
    assert torch.equal(ops.combine_partials((p0 + p1)[None], b, dtype), want)
    assert torch.equal(ops.combine_partials((p1 + p0)[None], b, dtype), want)


@settings(max_examples=10, deadline=None)
@given(vocab=st.sampled_from([5, 512, 700, 2048, 2100, 4999]), t=st.integers(1, 9),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 999))
def test_vocab_parallel_head_equals_tp1(vocab, t, dtype, seed):
    h = rand(t, 32, dtype=dtype, seed=seed)
    w_pad = torch.zeros(padded_vocab(vocab), 32, dtype=dtype)
    w_pad[:vocab] = rand(vocab, 32, dtype=dtype, seed=seed + 1)
    targets = torch.randint(0, vocab, (t,), generator=torch.Generator().manual_seed(seed))
    lp, ent = ops.logprob_head(h, w_pad[:vocab], targets, vocab, True)
    full = ops.full_logprobs(h, w_pad, vocab)
    for k in TP:
        lp_k, ent_k, full_k = head_parallel(h, w_pad, targets, vocab, k)
        assert torch.equal(lp_k, lp) and torch.equal(ent_k, ent) and torch.equal(full_k, full), k


def test_canonical_padded_vocab_does_not_depend_on_tp():
    assert padded_vocab(151936) == 153600 and padded_vocab(2048) == 2048
    for k in TP:
        shards = [vocab_shard(151936, r, k) for r in range(k)]
        assert shards[0][0] == 0 and shards[-1][1] == 153600
        assert all(a[1] == b[0] for a, b in zip(shards, shards[1:]))
    with pytest.raises(ValueError, match="must divide"):
        vocab_shard(1000, 0, 3)


def _gloo_worker(rank, world, init_file, out_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        x, w, b = rand(13, 96, dtype=torch.bfloat16), rand(40, 96, dtype=torch.bfloat16, seed=1), rand(40, seed=2)
        kk = 96 // world
        part = ops.shard_partial(x[:, rank * kk:(rank + 1) * kk], w[:, rank * kk:(rank + 1) * kk], world)
        parts = [torch.empty_like(part) for _ in range(world)]
        dist.all_gather(parts, part)
        y = ops.combine_partials(torch.stack(parts), b.to(torch.bfloat16), torch.bfloat16)

        vocab = 2100
        h = rand(7, 32, seed=3)
        w_pad = torch.zeros(padded_vocab(vocab), 32)
        w_pad[:vocab] = rand(vocab, 32, seed=4)
        targets = torch.arange(7) * 297 % vocab
        a, e = vocab_shard(vocab, rank, world)
        st = ops.shard_stats(h, w_pad[a:e], (a, e), vocab, targets, with_entropy=True)
        m, s, en, tgt = st.m, st.s, st.e, st.target
        gathered = []
        for t in (m, s, en, tgt):
            bufs = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(bufs, t)
            gathered.append(torch.stack(bufs))
        lse, mean_l, target = ops.combine_shards(*gathered)
        if rank == 0:
            lp1, ent1 = ops.logprob_head(h, w_pad[:vocab], targets, vocab, True)
            torch.save({"linear": torch.equal(y, ops.linear(x, w, b.to(torch.bfloat16), row_parallel=True)),
                        "logp": torch.equal(target - lse, lp1), "entropy": torch.equal(lse - mean_l, ent1)}, out_file)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_processes_equal_tp1(world, tmp_path):
    out = tmp_path / "result.pt"
    mp.spawn(_gloo_worker, args=(world, str(tmp_path / "init"), str(out)), nprocs=world, join=True)
    assert torch.load(out) == {"linear": True, "logp": True, "entropy": True}
