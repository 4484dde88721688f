"""``cuda_graphs=True`` on a CUDA GPU (Triton backend, bf16): the graphed forward-only log-prob pass gives the eager
pass's log-probs and entropies bit for bit, for batches of every padding case, graphs reused across batches of one
key, after an in-place weight update and after a parameter moved (captured again); the tiny Qwen3 and Llama (the
Triton attention kernel) and 2 layers of the 1.7B's shapes (head_dim 128: the Gluon attention on sm_90). The CPU's
side (padding arithmetic, refusals): tests/models/test_logprob_graphs.py. Marked ``gpu``."""

import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# (sequence lengths): one sequence; several, short; a padded count at a multiple of 256 (256 pad tokens); the pad
# sequence as the longest (grid of 256 rows from it); a 600-token sequence (grid of 768 rows); an empty sequence;
# the key of the second batch again with other lengths and ids (a replay of the same graph)
BATCHES = [[5], [17, 3, 40], [255, 1], [300, 2, 2, 2], [1], [500, 100], [7, 0, 9], [20, 20, 20]]


@pytest.fixture(scope="module", params=["qwen3", "llama3", "1.7b"])
def model(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from rlk_models.conversion import convert
    from rlk_models.testing.tiny import make_tiny_hf_checkpoint

    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "1.7b":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
        from vllm_cuda import COMMON, SHAPES

        hf = make_tiny_hf_checkpoint(tmp / "hf", "qwen3", seed=1,
                                     **{**SHAPES["1.7b"], "num_hidden_layers": 2, "head_dim": COMMON["head_dim"]})
    else:
        hf = make_tiny_hf_checkpoint(tmp / "hf", "llama" if request.param == "llama3" else "qwen3", seed=1)
    ckpt = convert(hf, tmp / "rlk", rlk_backend="triton", progress=False)
    return AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).cuda().eval()


def _batch(lengths, vocab, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = torch.randint(0, vocab, (sum(lengths),), device="cuda", generator=g)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device="cuda")
    return ids, cu


def _check(model, lengths, seed):
    ids, cu = _batch(lengths, model.config.vocab_size, seed)
    with torch.no_grad():
        want = model.packed_token_logprobs(ids, cu, return_entropy=True)
        got = model.packed_token_logprobs(ids, cu, return_entropy=True, cuda_graphs=True)
    for w, g, what in zip(want, got, ("log-probs", "entropy")):
        assert torch.equal(g, w), (lengths, what, (g != w).sum().item(), (g - w).abs().max().item())


def test_graphed_log_probs_are_the_eager_passes(model):
    from rlk_models.modeling.logprob_graphs import buckets

    graphs = model.logprob_graphs
    graphs.clear()
    captures = graphs.captures
    for i, lengths in enumerate(BATCHES):
        _check(model, lengths, seed=i)
    keys = {(*buckets(b), True) for b in BATCHES}
    assert graphs.captures - captures == len(keys) < len(BATCHES)  # one graph a key, the repeated key replayed
    assert set(graphs.graphs) == keys


def test_graphed_log_probs_follow_weight_updates(model):
    graphs = model.logprob_graphs
    with torch.no_grad():
        _check(model, [33, 64], seed=10)
        captures = graphs.captures
        for p in model.parameters():  # an optimizer's step: in place, the graphs read the new values
            p.mul_(0.96875)
        _check(model, [33, 64], seed=10)
        assert graphs.captures == captures
        layer = model.model.layers[0].mlp.down_proj
        layer.weight.data = layer.weight.data.clone()  # a parameter in new memory: every graph captured again
        _check(model, [33, 64], seed=10)
        assert graphs.captures == captures + 1 and len(graphs.graphs) == 1


def test_graphed_token_logprobs_of_a_padded_batch_under_inference_mode(model):
    g = torch.Generator(device="cuda").manual_seed(3)
    ids = torch.randint(0, model.config.vocab_size, (4, 70), device="cuda", generator=g)
    mask = torch.ones_like(ids)
    for b, n in enumerate((70, 12, 1, 45)):
        mask[b, n:] = 0
    with torch.inference_mode():
        want = model.token_logprobs(ids, mask)
        got = model.token_logprobs(ids, mask, cuda_graphs=True)
    assert torch.equal(got, want)
    with torch.no_grad(), pytest.raises(IndexError, match="token ids must lie in"):
        model.packed_token_logprobs(ids.reshape(-1) + model.config.vocab_size, torch.tensor([0, 280]),
                                    cuda_graphs=True)
