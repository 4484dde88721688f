"""The primitives every reference op is built from: accuracy and the order contract."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlk_models.ops.reference.primitives import exp, log, matmul_nt, pairwise_combine, sigmoid, tree_sum


def test_exp_log_sigmoid_accuracy_vs_float64():
    x = torch.linspace(-87.0, 88.7, 1_000_003)
    rel = ((exp(x).double() - x.double().exp()).abs() / x.double().exp()).max()
    assert rel < 2.5e-7, rel  # ~2 ulp of fp32 (measured 1.3 ulp)
    y = torch.cat([torch.rand(1_000_000) * 1e4 + 1e-30, torch.tensor([1.0, 0.5, 2.0, 1e-38, 3e38])])
    err = (log(y).double() - y.double().log()).abs() / y.double().log().abs().clamp_min(1.0)
    assert err.max() < 2.5e-7, err.max()
    z = torch.linspace(-30, 30, 100_001)
    assert (sigmoid(z).double() - torch.sigmoid(z.double())).abs().max() < 2e-7


def test_exp_log_special_values():
    inf, nan = float("inf"), float("nan")
    assert torch.equal(exp(torch.tensor([0.0, -inf, inf, -100.0, 100.0])), torch.tensor([1.0, 0.0, inf, 0.0, inf]))
    assert exp(torch.tensor([nan])).isnan().all()
    assert torch.equal(log(torch.tensor([1.0, 0.0, inf])), torch.tensor([0.0, -inf, inf]))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**16), start=st.integers(0, 63), length=st.integers(1, 64))
def test_transcendentals_are_positionwise(n, seed, start, length):
    """An element's result does not depend on where it sits in the tensor (vector body/tail)."""
    x = torch.randn(n + 64, generator=torch.Generator().manual_seed(seed)) * 5
    for f in (exp, sigmoid, lambda t: log(t.abs() + 1e-3)):
        full = f(x)
        part = f(x[start:start + length].clone())
        assert torch.equal(part, full[start:start + length])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 200), extra=st.integers(1, 300), seed=st.integers(0, 2**16))
def test_tree_sum_is_prefix_invariant(n, extra, seed):
    """Appending exact zeros never changes the sum: the property attention relies on."""
    x = torch.randn(3, n, generator=torch.Generator().manual_seed(seed))
    padded = torch.cat([x, torch.zeros(3, extra)], dim=1)
    assert torch.equal(tree_sum(x), tree_sum(padded))


@settings(max_examples=30, deadline=None)
@given(groups_per_rank=st.sampled_from([1, 2, 4, 8]), kg=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_grouped_tree_splits_into_rank_subtrees(groups_per_rank, kg, seed):
    """K cut into 8 canonical groups: ranks owning contiguous groups reduce their own subtree,
    and combining the ranks' partials pairwise gives the same bits as one rank."""
    k = 8 * kg
    x = torch.randn(5, k, generator=torch.Generator().manual_seed(seed))
    ranks = 8 // groups_per_rank
    partials = torch.stack([tree_sum(part, groups_per_rank) for part in x.chunk(ranks, dim=1)], dim=-1)
    assert torch.equal(pairwise_combine(partials), tree_sum(x, 8))


def test_tree_sum_accuracy():
    x = torch.randn(64, 4096, dtype=torch.float64)
    for g in (1, 8):
        assert (tree_sum(x.float(), g).double() - x.float().double().sum(-1)).abs().max() < 1e-4


def test_matmul_nt_matches_float64_and_rejects_bad_shapes():
    a, b = torch.randn(37, 123), torch.randn(29, 123)
    assert (matmul_nt(a, b, 8).double() - a.double() @ b.double().T).abs().max() < 1e-4
    try:
        matmul_nt(a, b[:, :5], 8)
    except ValueError as e:
        assert "do not contract" in str(e)
    else:
        raise AssertionError("expected ValueError")


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 9), max_size=40))
def test_embedding_runs_list_each_ids_tokens_in_token_order(ids):
    """canonical.embedding_runs (the Triton embedding backward's grid, no host read): each id's
    run starts at its first sorted position, lists its tokens in token order, and is counted
    there only; embedding_order (the reference's) lists the same runs."""
    from rlk_models.ops.canonical import embedding_order, embedding_runs

    order, sorted_ids, runs = embedding_runs(torch.tensor(ids, dtype=torch.int64))
    assert order.shape == sorted_ids.shape == runs.shape == (len(ids),)
    i, seen = 0, []
    while i < len(ids):
        n = int(runs[i])
        assert n > 0 and not runs[i + 1:i + n].any(), (ids, runs)
        v = int(sorted_ids[i])
        assert order[i:i + n].tolist() == [t for t, x in enumerate(ids) if x == v]
        seen.append(v)
        i += n
    assert seen == sorted(set(ids))
    o, uniq, counts, starts = embedding_order(torch.tensor(ids, dtype=torch.int64))
    assert torch.equal(o, order) and uniq.tolist() == seen and counts.tolist() == [ids.count(v) for v in seen]
    assert starts.tolist() == [sum(ids.count(u) for u in seen[:k]) for k in range(len(seen))]
