"""The vLLM-paging simulator (``rlk_models.testing.paged_runner``) on CPU with the reference backend:
teacher-forced log-probs through random block tables (block sizes 16 and 128), chunked prefill
under a token budget, staggered arrivals and mixed decode/prefill steps equal the training
class's log-probs bitwise. The same runner drives the Triton paged kernel on the H200
(benchmarks/triton/attention_sweep.py); this test keeps the runner itself honest."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlk_models.testing.paged_runner import PagedRunner, training_logprobs


@pytest.mark.parametrize("name", ["qwen3", "llama_bias"])
@pytest.mark.parametrize("block_size", [16, 128])
def test_paged_runner_equals_training(checkpoints, name, block_size):
    model = AutoModelForCausalLM.from_pretrained(checkpoints[name][1], dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(block_size)
    lens = [40, 3, 75, 20]
    seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in lens]
    want = training_logprobs(model, seqs)
    runner = PagedRunner(model, block_size=block_size, seed=1)
    got = runner.logprobs(seqs, prefill_lens=[37, 1, 50, 0], token_budget=24, arrivals=[0, 2, 1, 5])
    for w, o in zip(want, got):
        assert torch.equal(w, o)


def test_paged_runner_can_fail(checkpoints):
    """A cache written with the wrong slot mapping must show: the check is not vacuous."""
    model = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.bfloat16)
    seq = torch.randint(0, model.config.vocab_size, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    runner = PagedRunner(model, block_size=16)
    import rlk_models.testing.paged_runner as paged

    real = paged.slots_for
    paged.slots_for = lambda table, pos, bs: real(table, pos.flip(0), bs)  # writes K/V to the wrong slots
    try:
        got = runner.logprobs([seq], prefill_lens=[20])[0]
    finally:
        paged.slots_for = real
    assert not torch.equal(got, training_logprobs(model, [seq])[0])
