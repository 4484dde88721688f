"""``ops.checks.read_once``: a value check reads a tensor shared by the layers of one forward once,
and reads again for a new tensor, an in-place change, or an inference-mode tensor -- a stale
answer would let a bad position through."""

import pytest
import torch

from rlk_models.ops import get_backend
from rlk_models.ops.checks import read_once


def test_read_once_rereads_new_modified_and_inference_tensors():
    calls = []

    def fn(t):
        calls.append(1)
        return int(t.max())

    t = torch.tensor([1, 5, 2])
    assert read_once(t, "x", fn) == 5 and read_once(t, "x", fn) == 5 and len(calls) == 1
    t[0] = 9  # in place: the version counter moves
    assert read_once(t, "x", fn) == 9 and len(calls) == 2
    u = t.clone()  # same values, another tensor
    assert read_once(u, "x", fn) == 9 and len(calls) == 3
    assert read_once(u, "y", fn) == 9 and len(calls) == 4  # each purpose has its own slot
    with torch.inference_mode():
        w = torch.tensor([3])
        assert read_once(w, "x", fn) == 3 and read_once(w, "x", fn) == 3 and len(calls) == 6


def test_rope_still_refuses_a_position_past_the_table_after_a_good_call():
    ops = get_backend("reference")
    table = torch.zeros(8, 4)
    x = torch.zeros(3, 2, 4)
    pos = torch.tensor([0, 1, 2])
    ops.rope(x, pos, table)
    pos[2] = 8  # the same tensor, modified in place
    with pytest.raises(IndexError, match="position 8 is past the table"):
        ops.rope(x, pos, table)


def test_cu_seqlens_read_once_for_the_check_and_the_grid(monkeypatch):
    """``read_cu_seqlens``: (first, last, longest) in one read per tensor, which every layer's
    bounds check and attention grid share; a bad tensor is still refused."""
    from rlk_models.ops import checks

    assert checks.read_cu_seqlens(torch.tensor([0, 3, 3, 10])) == (0, 10, 7)
    assert checks.read_cu_seqlens(torch.tensor([0])) == (0, 0, 0)
    reads = []
    real = checks.read_once
    monkeypatch.setattr(checks, "read_once", lambda t, what, fn: real(t, what, lambda c: reads.append(1) or fn(c)))
    ops = get_backend("reference")
    q, k = torch.randn(10, 2, 16), torch.randn(10, 1, 16)
    cu = torch.tensor([0, 4, 10])
    for _ in range(3):  # three layers of one forward
        ops.varlen_attention(q, k, k, cu, 0.25)
    assert len(reads) == 1
    with pytest.raises(ValueError, match="cu_seqlens must run from 0 to T=10"):
        ops.varlen_attention(q, k, k, torch.tensor([0, 4, 9]), 0.25)


def test_trusted_values_skips_value_reads_but_not_shape_checks(monkeypatch):
    """Inside ``trusted_values()`` (the vLLM class's forward: vLLM validated its ids and positions) no
    check reads a tensor's values -- on a GPU each read is a host sync, per layer for vLLM's
    inference-mode positions -- while shape checks still refuse; outside, the value checks are back."""
    from rlk_models.ops import checks

    ops = get_backend("reference")
    table = torch.zeros(8, 4)
    x = torch.zeros(3, 2, 4)
    reads = []
    real = checks.read_once
    monkeypatch.setattr(checks, "read_once", lambda t, what, fn: real(t, what, lambda c: reads.append(what) or fn(c)))
    with checks.trusted_values(), checks.trusted_values():  # nests
        ops.rope(x, torch.tensor([0, 1, 2]), table)
        with pytest.raises(ValueError, match="do not match"):
            ops.rope(x, torch.tensor([0, 1]), table)
    assert reads == []
    with pytest.raises(IndexError, match="position 8 is past the table"):
        ops.rope(x, torch.tensor([0, 1, 8]), table)
    assert reads == ["rope positions"]
    with pytest.raises(IndexError, match="token ids must lie in"):
        ops.embedding(torch.tensor([0, 9]), torch.zeros(8, 4))


def test_head_targets_range_read_after_the_forward_is_queued():
    """``checks.range_later`` on the CPU reads now; the head's targets check raises naming the range, for each
    backend's ``logprob_head`` (the reference here; the Triton one in tests/ops/triton), and passes good targets."""
    from rlk_models.ops import checks

    assert checks.range_later(torch.tensor([4, -2, 7]))() == (-2, 7)
    ops = get_backend("reference")
    h, w = torch.randn(4, 16), torch.randn(40, 16)
    assert ops.logprob_head(h, w, torch.tensor([0, 39, 5, 1]), 40)[0].shape == (4,)
    with pytest.raises(IndexError, match=r"targets must lie in \[0, 40\), got range \[0, 40\]"):
        ops.logprob_head(h, w, torch.tensor([0, 40, 5, 1]), 40)
    with checks.trusted_values():  # trusted: not read (the kernels clamp or compare ids, never index by them)
        ops.logprob_head(h, w, torch.tensor([0, 40, 5, 1]), 40)


def test_packed_lengths_checks_in_one_read_and_seeds_the_attention_read(monkeypatch):
    """``packed_lengths``: the lengths (and a caller's extra values) in one read, bad ``cu_seqlens`` refused by
    name; the attention layers of the same forward then read the tensor no more -- until it changes in place."""
    from rlk_models.ops import checks

    cu = torch.tensor([0, 4, 4, 10])
    assert checks.packed_lengths(cu, 10, also=torch.tensor([7, -1])) == ([4, 0, 6], [7, -1])
    reads = []
    real = checks.read_once
    monkeypatch.setattr(checks, "read_once", lambda t, what, fn: real(t, what, lambda c: reads.append(1) or fn(c)))
    assert checks.read_cu_seqlens(cu) == (0, 10, 6) and reads == []
    cu[1] = 2
    assert checks.read_cu_seqlens(cu) == (0, 10, 6) and reads == [1]
    for bad, t, match in [(torch.tensor([0, 4, 9]), 10, r"rise from 0 to T=10, got \[0, 4, 9\]"),
                          (torch.tensor([1, 10]), 10, r"got \[1, 10\]"),
                          (torch.tensor([0, 6, 4, 10]), 10, r"got \[0, 6, 4, 10\]"),
                          (torch.tensor([10]), 10, r"got shape \(1,\)"),
                          (torch.tensor([[0, 10]]), 10, r"got shape \(1, 2\)"),
                          (torch.tensor([0]), 0, "holds no tokens")]:
        with pytest.raises(ValueError, match=match):
            checks.packed_lengths(bad, t)
