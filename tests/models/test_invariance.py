"""Whole-model bitwise contract (torch.equal): a sequence's token log-probs are the same
alone, inside batches of other sequences of other lengths at any position, right-padded or
packed, with 1 or 2 threads and on every run; backward twice gives equal gradients."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM


@pytest.fixture(scope="module", params=["qwen3", "llama3"])
def model(request, checkpoints):
    return AutoModelForCausalLM.from_pretrained(checkpoints[request.param][1], dtype=torch.bfloat16)


def seqs(n, seed, vocab, lo=2, hi=60):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g) for _ in range(n)]


def right_padded(batch, pad=0):
    s = max(len(x) for x in batch)
    ids = torch.full((len(batch), s), pad)
    mask = torch.zeros(len(batch), s, dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, :len(x)], mask[i, :len(x)] = x, 1
    return ids, mask


@settings(max_examples=10, deadline=None)
@given(n_others=st.integers(0, 6), pos=st.integers(0, 6), seed=st.integers(0, 10_000))
def test_sequence_alone_equals_in_any_batch(model, n_others, pos, seed):
    vocab = model.config.vocab_size
    target = seqs(1, seed, vocab)[0]
    alone = model.token_logprobs(target[None])[0]
    others = seqs(n_others, seed + 1, vocab)
    pos = min(pos, n_others)
    batch = others[:pos] + [target] + others[pos:]
    ids, mask = right_padded(batch, pad=int(seed % vocab))
    padded = model.token_logprobs(ids, mask)[pos, :len(target) - 1]
    assert torch.equal(padded, alone)
    cu = torch.tensor([0] + [len(x) for x in batch]).cumsum(0)
    packed = model.packed_token_logprobs(torch.cat(batch), cu)
    assert torch.equal(packed[int(cu[pos]):int(cu[pos + 1]) - 1], alone)


def test_threads_and_repeats(model):
    batch = seqs(5, 3, model.config.vocab_size)
    ids, mask = right_padded(batch)
    torch.set_num_threads(2)
    a = model.token_logprobs(ids, mask)
    b = model.token_logprobs(ids, mask)
    torch.set_num_threads(1)
    c = model.token_logprobs(ids, mask)
    assert torch.equal(a, b) and torch.equal(a, c)


def test_entropy_alone_equals_in_batch(model):
    batch = seqs(4, 5, model.config.vocab_size)
    ids, mask = right_padded(batch)
    lp, ent = model.token_logprobs(ids, mask, return_entropy=True)
    lp1, ent1 = model.token_logprobs(batch[2][None], return_entropy=True)
    n = len(batch[2]) - 1
    assert torch.equal(lp[2, :n], lp1[0]) and torch.equal(ent[2, :n], ent1[0])
    assert bool((ent1 > 0).all())


def test_backward_twice_gives_equal_gradients(model):
    batch = seqs(3, 7, model.config.vocab_size)
    ids, mask = right_padded(batch)

    def grads():
        model.zero_grad(set_to_none=True)
        lp = model.token_logprobs(ids, mask)
        (lp * mask[:, 1:]).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    g1, g2 = grads(), grads()
    assert g1.keys() == g2.keys() and all(torch.equal(g1[k], g2[k]) for k in g1)
    model.zero_grad(set_to_none=True)
