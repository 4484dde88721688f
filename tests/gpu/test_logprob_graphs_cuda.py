"""``cuda_graphs=True`` on a CUDA GPU (Triton backend, bf16): the graphed forward-only log-prob pass gives the eager
pass's log-probs and entropies bit for bit, for batches of every padding case, graphs reused across batches of one
key, after an in-place weight update and after a parameter moved (captured again); the graphed training pass
(forward and backward graphs) gives the eager log-probs and the eager backward's gradients of the padded batch bit
for bit (and the entropy, which it does not differentiate), with a score mask over the scored rows' head only, in
``.grad`` with no copy (``GradBuffers``) or handed
back to ``torch.autograd.grad``, accumulates into ``.grad`` across micro-batches as eager does, and refuses a
forward that would overwrite activations a backward still needs, and inside DistributedDataParallel hands its
gradients to the reducer; the tiny Qwen3 and
Llama (the Triton attention kernel) and 2 layers of the 1.7B's shapes (head_dim 128: the Gluon attention on
sm_90). The CPU's side (padding arithmetic, refusals): tests/models/test_logprob_graphs.py. Marked ``gpu``."""

import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# (sequence lengths): one sequence; several, short; a count at a multiple of 256 (an empty pad sequence); the pad
# sequence as the longest (grid of 256 rows from it); 768 padded tokens with a 500-token sequence (grid of 512
# rows); an empty sequence; the second batch's key again with other lengths and ids (replays of one graph)
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
    keys = {(*buckets(b), True, None) for b in BATCHES}  # no score mask: the head over every row
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
    """The padded batch's graphed pass (an RL step's old-policy and reference passes: ``token_logprobs`` with a score
    mask) gives the eager bits and, once captured, waits on the GPU twice: the packing's token count and the graphs'
    one read."""
    g = torch.Generator(device="cuda").manual_seed(3)
    ids = torch.randint(0, model.config.vocab_size, (4, 70), device="cuda", generator=g)
    mask = torch.ones_like(ids)
    for b, n in enumerate((70, 12, 1, 45)):
        mask[b, n:] = 0
    comp = mask[:, 1:].bool() & (torch.arange(1, 70, device="cuda") >= 8)
    with torch.inference_mode():
        want = model.token_logprobs(ids, mask)
        got = model.token_logprobs(ids, mask, cuda_graphs=True)
        scored = model.token_logprobs(ids, mask, cuda_graphs=True, score_mask=comp)
        waits = _syncs(lambda: model.token_logprobs(ids, mask, cuda_graphs=True, score_mask=comp))
    assert torch.equal(got, want)
    assert torch.equal(scored, torch.where(comp, want, 0.0))
    assert len(waits) == 2, waits
    with torch.no_grad(), pytest.raises(IndexError, match="token ids must lie in"):
        model.packed_token_logprobs(ids.reshape(-1) + model.config.vocab_size, torch.tensor([0, 280]),
                                    cuda_graphs=True)


def _grads(model):
    out = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out


def _differing(a, b, model):
    return [(name, None if x is None or y is None else int((x != y).sum()))
            for (name, _), x, y in zip(model.named_parameters(), a, b)
            if (x is None) != (y is None) or (x is not None and not torch.equal(x, y))]


def _padded_eager(model, ids, cu, entropy=False, score=None):
    """The eager pass over the batch a training graph runs (``PaddedBatch``: the same padding and attention grid, and
    with ``score`` the same selected head rows), masked as the graphed pass masks it: whose backward the graph's must
    equal bitwise (the backward's sums over tokens are not batch-invariant, so the unpadded batch's gradients may
    differ in their last bits)."""
    from rlk_models.modeling.logprob_graphs import PaddedBatch, buckets, scored_rows

    t = ids.numel()
    lengths = (cu[1:] - cu[:-1]).tolist()
    t_pad, n_seq, longest = buckets(lengths)
    rows = None if score is None else scored_rows(int(score.sum()), t_pad)
    batch = PaddedBatch.empty(t_pad, n_seq, longest, "cuda", rows)
    with torch.no_grad():
        valid = batch.fill(ids, cu, score)
    logp = batch.run(model, entropy)[0]
    return torch.where(valid, logp[:t], torch.zeros_like(logp[:t]))


def test_graphed_training_pass_gives_the_eager_log_probs_and_gradients(model):
    """Per batch: the graphed pass's log-probs equal the eager pass's bitwise, and its gradients (of a weighted sum of
    the log-probs) the eager backward's of the same padded batch. An eager pass's output stays alive across the
    captures: its AccumulateGrad nodes, on the default stream, must not break them (``fresh_leaves``)."""
    graphs = model.logprob_graphs
    graphs.clear()
    model.zero_grad(set_to_none=True)
    alive = model.packed_token_logprobs(*_batch([9], model.config.vocab_size, seed=19))
    batches = [[5], [17, 3, 40], [7, 0, 9, 1], [20, 20, 20], [255, 1]]  # the second's key again in the fourth
    for i, lengths in enumerate(batches):
        ids, cu = _batch(lengths, model.config.vocab_size, seed=20 + i)
        w = torch.randn(ids.numel(), device="cuda", generator=torch.Generator(device="cuda").manual_seed(i))
        with torch.no_grad():
            want = model.packed_token_logprobs(ids, cu)
        (_padded_eager(model, ids, cu) * w).sum().backward()
        want_grads = _grads(model)
        got = model.packed_token_logprobs(ids, cu, cuda_graphs=True)
        assert got.requires_grad and torch.equal(got.detach(), want), (lengths, (got != want).sum().item())
        (got * w).sum().backward()
        # no copy: each .grad is the buffer the backward graph wrote (GradBuffers)
        assert all(p.grad.data_ptr() == b.data_ptr() for p, b in zip(model.parameters(), graphs.grad_buffers.store))
        got_grads = _grads(model)
        assert not _differing(got_grads, want_grads, model), (lengths, _differing(got_grads, want_grads, model))
    assert len(graphs.train_graphs) == 4 and not graphs.graphs and alive.requires_grad
    # torch.autograd.grad: the gradients handed back (copies), .grad untouched
    (_padded_eager(model, ids, cu) * w).sum().backward()
    want_grads = _grads(model)
    got = torch.autograd.grad((model.packed_token_logprobs(ids, cu, cuda_graphs=True) * w).sum(),
                              list(model.parameters()))
    assert not _differing(list(got), want_grads, model) and all(p.grad is None for p in model.parameters())


def test_graphed_training_accumulates_follows_updates_and_guards_its_activations(model):
    graphs = model.logprob_graphs
    graphs.clear()
    captures = graphs.captures  # counted over the model's life
    model.zero_grad(set_to_none=True)
    a, b = _batch([33, 64], model.config.vocab_size, 30), _batch([300], model.config.vocab_size, 31)
    for step in range(2):  # two micro-batches accumulated, an in-place update, again: the same graphs
        for ids, cu in (a, b):
            _padded_eager(model, ids, cu).sum().backward()
        want = _grads(model)
        for ids, cu in (a, b):
            model.packed_token_logprobs(ids, cu, cuda_graphs=True).sum().backward()
        assert not _differing(_grads(model), want, model), step
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.96875)
    assert graphs.captures - captures == 2 and len(graphs.train_graphs) == 2
    # two sizes' forwards before one backward: their activations are in separate pools
    la = model.packed_token_logprobs(*a, cuda_graphs=True)
    lb = model.packed_token_logprobs(*b, cuda_graphs=True)
    with pytest.raises(RuntimeError, match="still waits for its backward"):
        model.packed_token_logprobs(*a, cuda_graphs=True)
    (la.sum() + lb.sum()).backward(retain_graph=True)
    both = _grads(model)
    # one backward through both: the bits of two backward calls, one an output (each replay adds its gradients into
    # .grad; one eager backward would sum a tied parameter's four contributions in its own order first)
    _padded_eager(model, *a).sum().backward()
    _padded_eager(model, *b).sum().backward()
    assert not _differing(both, _grads(model), model)
    model.packed_token_logprobs(*a, cuda_graphs=True)  # la's backward ran: a new forward may overwrite its activations
    with pytest.raises(RuntimeError, match="ran another forward after this output's"):
        la.sum().backward()
    del la
    model.zero_grad(set_to_none=True)
    out = model.packed_token_logprobs(*a, cuda_graphs=True)  # the previous output, never backpropagated, was dropped
    with torch.no_grad():
        assert torch.equal(out.detach(), model.packed_token_logprobs(*a))


def test_graphed_training_pass_gives_the_entropy_without_its_gradient(model):
    ids, cu = _batch([40, 9], model.config.vocab_size, 40)
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        want_lp, want_ent = model.packed_token_logprobs(ids, cu, return_entropy=True)
    _padded_eager(model, ids, cu, entropy=True).sum().backward()  # the head with the entropy, its gradient not asked
    want = _grads(model)
    logp, ent = model.packed_token_logprobs(ids, cu, return_entropy=True, cuda_graphs=True)
    assert torch.equal(logp.detach(), want_lp) and torch.equal(ent.detach(), want_ent)
    logp.sum().backward()
    assert not _differing(_grads(model), want, model)
    logp, ent = model.packed_token_logprobs(ids, cu, return_entropy=True, cuda_graphs=True)
    with pytest.raises(RuntimeError, match="the entropy's gradient is not graphed"):
        (logp.sum() + ent.sum()).backward()


def test_graphed_pass_with_a_score_mask_runs_the_head_over_the_scored_rows(model):
    """``score_mask`` under graphs: the head over a quarter, half or three quarters of the padded batch's rows (the
    scored ones first), a graph per such size; the scored tokens' log-probs and entropies are the eager pass's bit for
    bit (with and without the mask), every other entry 0; with gradients, the eager backward's of the same padded
    batch and rows. A mask over most of the batch runs the unmasked graph."""
    from rlk_models.modeling.logprob_graphs import buckets, scored_rows

    graphs = model.logprob_graphs
    graphs.clear()
    model.zero_grad(set_to_none=True)
    g = torch.Generator(device="cuda").manual_seed(60)
    keys = set()
    for i, (lengths, share) in enumerate([([40, 9, 120], 0.2), ([200, 30], 0.45), ([17, 3, 40], 0.7), ([250], 1.0)]):
        ids, cu = _batch(lengths, model.config.vocab_size, seed=60 + i)
        score = torch.rand(ids.numel(), device="cuda", generator=g) < share
        with torch.no_grad():
            want = model.packed_token_logprobs(ids, cu, return_entropy=True)
            masked = model.packed_token_logprobs(ids, cu, return_entropy=True, score_mask=score)
            got = model.packed_token_logprobs(ids, cu, return_entropy=True, cuda_graphs=True, score_mask=score)
        for w, m, o, what in zip(want, masked, got, ("log-probs", "entropy")):
            assert torch.equal(o, m) and torch.equal(o[score], w[score]), (lengths, what)
            assert bool((o[~score] == 0).all()), (lengths, what)
        keys.add((*buckets(lengths), True, scored_rows(int(score.sum()), buckets(lengths)[0])))
        w = torch.randn(ids.numel(), device="cuda", generator=g)
        (_padded_eager(model, ids, cu, score=score) * w).sum().backward()
        want_grads = _grads(model)
        logp = model.packed_token_logprobs(ids, cu, cuda_graphs=True, score_mask=score)
        assert torch.equal(logp.detach(), masked[0]), lengths
        (logp * w).sum().backward()
        assert not _differing(_grads(model), want_grads, model), lengths
    assert set(graphs.graphs) == keys and {k[-1] is None for k in keys} == {True, False}


def test_trls_fused_forward_under_cuda_graphs_enable(model):
    """``forward(..., labels, fused_lm_head=True)`` (TRL's protocol) after ``cuda_graphs_enable()``, on TRL's layout
    (left-padded prompts whose labels are -100, a right-padded completion): its log-probs, entropies, label mask and
    loss are the eager forward's bitwise, without gradients (the old-policy pass) and with them, and its gradients
    the eager backward's of the padded batch. A pass once captured waits on the GPU twice, both before its replay:
    the packing's token count and the graphs' one read, which the labels' checks and count ride along (counted by
    ``torch.cuda.set_sync_debug_mode``)."""
    from rlk_models.modeling.hf import pack

    g = torch.Generator(device="cuda").manual_seed(50)
    b, s = 3, 24
    ids = torch.randint(0, model.config.vocab_size, (b, s), device="cuda", generator=g)
    mask = torch.ones_like(ids)
    mask[1, :4], mask[2, :7], mask[0, 20:] = 0, 0, 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :10] = -100
    w = torch.randn(b, s - 1, device="cuda", generator=g)
    model.zero_grad(set_to_none=True)
    model.logprob_graphs.clear()
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    p = pack(ids, mask)
    shifted = torch.cat([labels[:, 1:], labels.new_full((b, 1), -100)], 1).reshape(-1)[p.flat_index]
    wp = torch.where(shifted != -100, torch.cat([w, w.new_zeros(b, 1)], 1).reshape(-1)[p.flat_index], 0.0)
    # the head with the entropy, as the fused pass runs it (its backward's bits differ from the head's without)
    # over the labelled rows only (the graphed fused pass's score mask)
    (_padded_eager(model, p.input_ids, p.cu_seqlens, entropy=True, score=shifted != -100) * wp).sum().backward()
    want_grads = _grads(model)
    model.cuda_graphs_enable()
    try:
        with torch.no_grad():
            old = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        got = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        for out in (old, got):
            for field in ("log_probs", "entropy", "label_mask", "loss"):
                assert torch.equal(getattr(out, field).detach(), getattr(want, field)), field
        (got.log_probs * w).sum().backward()
        assert not _differing(_grads(model), want_grads, model)
        assert len(model.logprob_graphs.graphs) == 1 and len(model.logprob_graphs.train_graphs) == 1
        with torch.no_grad():
            waits = _syncs(lambda: model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True))
        assert len(waits) == 2, waits
        waits = _syncs(lambda: model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True))
        assert len(waits) == 2, waits
    finally:
        model.cuda_graphs_disable()


def _syncs(fn) -> list[str]:
    """Where ``fn()`` made the host wait on the GPU (``set_sync_debug_mode``'s warnings): "file:line" each time."""
    import warnings

    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return [f"{Path(w.filename).name}:{w.lineno}" for w in seen if "called a synchronizing" in str(w.message)]


def test_graphed_training_inside_ddp_hands_its_gradients_to_the_reducer(model):
    """DistributedDataParallel (one process, NCCL; what ``RLKGRPOTrainer(cuda_graphs=True)`` gets under ``accelerate
    launch`` on several GPUs): TRL's fused forward through the wrapper replays the graphs, and the reducer, run by
    autograd at each parameter, all-reduces the gradients the backward graph left in ``.grad`` (one rank: the same
    values) -- bitwise the unwrapped graphed pass's, step after step, with DDP's own ``.grad`` buckets too
    (``gradient_as_bucket_view``). Several ranks: tests/models/test_logprob_graphs.py's DDP test (CPU, gloo)."""
    import copy
    import os
    import socket

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    g = torch.Generator(device="cuda").manual_seed(70)
    b, s = 3, 40
    ids = torch.randint(0, model.config.vocab_size, (b, s), device="cuda", generator=g)
    mask = torch.ones_like(ids)
    mask[1, :6], mask[2, 30:] = 0, 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :12] = -100
    w = torch.randn(b, s - 1, device="cuda", generator=g)
    started = not dist.is_initialized()
    if started:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    try:
        for bucket_view in (False, True):
            plain, inner = (copy.deepcopy(model).train() for _ in range(2))
            plain.cuda_graphs_enable()
            inner.cuda_graphs_enable()
            ddp = DistributedDataParallel(inner, device_ids=[0], gradient_as_bucket_view=bucket_view)
            for step in range(3):
                for net in (plain, ddp):
                    out = net(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
                    (out.log_probs * w).sum().backward()
                want = _grads(plain)
                got = [p.grad.clone() for p in inner.parameters()]
                inner.zero_grad(set_to_none=not bucket_view)  # DDP's buckets stay the .grad tensors
                assert not _differing(got, want, inner), (bucket_view, step)
                with torch.no_grad():
                    for p, q in zip(plain.parameters(), inner.parameters()):
                        p.mul_(0.96875)
                        q.mul_(0.96875)
            del ddp
    finally:
        if started:
            dist.destroy_process_group()


def test_grpo_updates_under_graphs_score_the_rollout_exactly(model):
    """``rlk-grpo --cuda-graphs``'s update (``cli.grpo.ppo_update``): the policy's graphed passes (two PPO epochs, each
    forward then backward) and the reference's forward graph, fp32 master weights copied into the parameters in
    place and their ``.grad`` set to None after each step: at every step the graphed pass gives the log-probs an
    eager pass of the current weights gives (mismatch 0, ratio exactly 1), and the update moves the weights."""
    import copy

    from rlk_models.cli.grpo import GRPOConfig, MasterWeights, Rollout, ppo_update

    policy, ref = copy.deepcopy(model).train(), copy.deepcopy(model)
    cfg = GRPOConfig(lr=1e-3, kl_coef=0.05, ppo_epochs=2, device="cuda", cuda_graphs=True)
    opt = MasterWeights(policy, cfg.lr)
    g = torch.Generator(device="cuda").manual_seed(0)
    lengths = torch.tensor([12, 9, 7, 12, 10, 8], device="cuda")
    b, s = len(lengths), 12
    ids = torch.randint(0, model.config.vocab_size, (b, s), device="cuda", generator=g)
    mask = (torch.arange(s, device="cuda") < lengths[:, None]).long()
    comp = mask[:, 1:].bool() & (torch.arange(1, s, device="cuda") >= 4)  # the completions start at position 4
    for step in range(3):
        before = [p.detach().clone() for p in policy.parameters()]
        with torch.no_grad():
            old = policy.token_logprobs(ids, mask)  # eager: the rollout's log-probs of the current weights
        adv = torch.randn(b, device="cuda", generator=g)
        stats = ppo_update(policy, ref, opt, Rollout(ids, mask, comp, old, adv[None], adv), cfg, baseline=False)
        assert stats["mismatch_count"] == 0 and stats["max_abs_diff"] == 0.0, (step, stats)
        assert stats["ratio_min"] == stats["ratio_max"] == 1.0 and stats["tokens"] == int(comp.sum()), (step, stats)
        assert any(not torch.equal(p, q) for p, q in zip(policy.parameters(), before)), step
        assert all(p.grad is None for p in policy.parameters())
    assert len(policy.logprob_graphs.train_graphs) == 1 and len(ref.logprob_graphs.graphs) == 1
