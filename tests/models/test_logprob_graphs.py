"""``LogprobGraphs``' padding and its refusals, on the CPU (its replays against the eager pass, bitwise, are
tests/gpu/test_logprob_graphs_cuda.py)."""

import copy
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlk_models.modeling.logprob_graphs import LogprobGraphs, buckets, scored_rows, template_lengths


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=40), st.sampled_from([1, 16, 256]))
def test_a_batch_fits_the_template_its_graph_was_captured_on(lengths, step):
    """Padding stays under an eighth of the tokens (or one step), and the padded batch, its pad sequence included,
    fits the attention grid of the template its graph was captured on."""
    t_pad, n_seq, longest = buckets(lengths, step)
    t = sum(lengths)
    assert n_seq == len(lengths) and t_pad % step == 0 and 0 < t_pad and 0 <= t_pad - t <= max(step, t // 8)
    assert max(lengths) <= longest and t_pad - t <= longest <= t_pad  # every sequence fits the grid
    assert longest & (longest - 1) == 0 or longest == t_pad
    template = template_lengths(t_pad, n_seq, longest)
    assert len(template) == n_seq + 1 and sum(template) == t_pad and max(template) == longest and min(template) >= 0


def test_bucket_sizes():
    assert buckets([5]) == (256, 1, 256) and buckets([255, 1]) == (256, 2, 256) and buckets([0]) == (256, 1, 256)
    assert buckets([1024]) == (1024, 1, 1024) and buckets([1025]) == (1280, 1, 1280)  # no pad sequence at 1024
    assert buckets([500, 100]) == (768, 2, 512) and buckets([3000, 1000]) == (4096, 2, 4096)
    assert buckets([1000] * 9) == (9216, 9, 1024)  # 9000 tokens: multiples of 1024 from 8192


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 1 << 14).map(lambda n: n * 64), st.data())
def test_scored_rows_cover_the_scored_tokens_in_quarters(t_pad, data):
    """The head's rows of a padded batch (``scored_rows``): every scored token has a row, the rows are a quarter,
    half or three quarters of the batch, and above three quarters the head runs over the whole batch (None)."""
    scored = data.draw(st.integers(0, t_pad))
    rows = scored_rows(scored, t_pad)
    if rows is None:
        assert scored > 3 * t_pad // 4
    else:
        assert scored <= rows and rows in (t_pad // 4, t_pad // 2, 3 * t_pad // 4)
        assert rows - scored < t_pad // 4 or scored == 0


def test_template_lengths_refuses_what_no_batch_fits():
    with pytest.raises(ValueError, match="no template of 3 sequences, 1024 tokens, longest 256"):
        template_lengths(1024, 2, 256)


def test_cuda_graphs_refuse_the_cpu(checkpoints):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    for grad in (False, True):
        with torch.set_grad_enabled(grad), pytest.raises(ValueError, match="on a CUDA device, got cpu"):
            model.token_logprobs(ids, return_entropy=True, cuda_graphs=True)
    for grad in (False, True):
        with torch.set_grad_enabled(grad), pytest.raises(ValueError, match="on a CUDA device, got cpu"):
            model.packed_token_logprobs(ids.reshape(-1), torch.tensor([0, 9, 18]), cuda_graphs=True)
    for bad in ({"token_step": 0}, {"token_step": 96}, {"max_graphs": 0}, {"max_train_graphs": 0}):
        with pytest.raises(ValueError, match="token_step must be a power of two, max_graphs and max_train_graphs >= 1"):
            LogprobGraphs(**bad)


def test_cuda_graphs_enable_sets_the_log_prob_passes_default(checkpoints):
    """``cuda_graphs_enable()``: the log-prob passes (``token_logprobs``, ``packed_token_logprobs``, ``forward(...,
    fused_lm_head=True)``, TRL's) default to graphs (refused on the CPU, after the fused pass's label checks: labels
    out of range or not the next input ids, skipping positions and embeddings are refused by name); an explicit
    ``cuda_graphs=False``, the logits' forward and ``cuda_graphs_disable()`` stay eager, with the eager bits."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding, as TRL's prompts
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :5] = -100  # the prompt's labels
    with torch.no_grad():
        want = model.token_logprobs(ids, mask)
        want_fused = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        logits = model(input_ids=ids, attention_mask=mask).logits
    model.cuda_graphs_enable()
    assert copy.deepcopy(model)._cuda_graphs_default
    with pytest.raises(ValueError, match="on a CUDA device, got cpu"):
        model.token_logprobs(ids, mask)
    with pytest.raises(ValueError, match="on a CUDA device, got cpu"):
        model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    other = labels.clone()
    other[0, 6] = (ids[0, 6] + 1) % model.config.vocab_size
    with pytest.raises(ValueError, match="labels other than the next input id"):
        model(input_ids=ids, attention_mask=mask, labels=other, fused_lm_head=True)
    other[0, 6] = model.config.vocab_size + 3  # out of range: named as such, before the comparison with the ids
    with pytest.raises(IndexError, match=rf"labels must be -100 or lie in \[0, {model.config.vocab_size}\)"):
        model(input_ids=ids, attention_mask=mask, labels=other, fused_lm_head=True)
    packed = ids[:1].clone().masked_fill(torch.arange(9) == 5, -100)  # two sequences: no label at the second's start
    with pytest.raises(ValueError, match="positions that skip or repeat"):
        model(input_ids=ids[:1], position_ids=torch.tensor([[0, 1, 2, 4, 5, 0, 1, 2, 3]]), labels=packed,
              fused_lm_head=True)
    with pytest.raises(ValueError, match="on a CUDA device, got cpu"):  # the same batch, its positions in order
        model(input_ids=ids[:1], position_ids=torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]]), labels=packed,
              fused_lm_head=True)
    with pytest.raises(ValueError, match="reads input_ids, not inputs_embeds"):
        model(inputs_embeds=model.model.embed_tokens(ids), attention_mask=mask, labels=labels, fused_lm_head=True)
    with torch.no_grad():
        assert torch.equal(model.token_logprobs(ids, mask, cuda_graphs=False), want)
        assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, logits)
        model.cuda_graphs_disable()
        got = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    assert torch.equal(got.log_probs, want_fused.log_probs) and torch.equal(got.loss, want_fused.loss)


def test_a_copy_of_the_model_starts_with_no_graphs(checkpoints):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.float32)
    graphs = model.logprob_graphs
    graphs.graphs[(1, 1, 1, False)] = object()  # stands for a captured graph, which no copy can share
    graphs.params = (1,)
    ref = copy.deepcopy(model)
    assert model.logprob_graphs is graphs and ref.logprob_graphs is not graphs
    assert not ref.logprob_graphs.graphs and ref.logprob_graphs.params is None
    back = pickle.loads(pickle.dumps(LogprobGraphs(token_step=64, max_graphs=3, max_train_graphs=2)))
    assert (back.token_step, back.max_graphs, back.max_train_graphs, len(back.graphs)) == (64, 3, 2, 0)


def _interpreted(tmp_path, lengths, seed):
    """A tiny Qwen3 on the Triton backend (interpreter, float32: it has no bf16 constants; the GPU test runs bf16) and
    a random packed batch of ``lengths``: (model, ids, cu_seqlens)."""
    from transformers import AutoModelForCausalLM

    from rlk_models.conversion import convert
    from rlk_models.testing.tiny import make_tiny_hf_checkpoint

    hf = make_tiny_hf_checkpoint(tmp_path / "hf", "qwen3", seed=seed)
    model = AutoModelForCausalLM.from_pretrained(convert(hf, tmp_path / "rlk", rlk_backend="triton", progress=False),
                                                 dtype=torch.float32)
    g = torch.Generator().manual_seed(sum(lengths))
    ids = torch.randint(0, model.config.vocab_size, (sum(lengths),), generator=g)
    return model, ids, torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])


@pytest.mark.parametrize("lengths", [[5, 17, 3], [255, 1], [7, 0, 40], [40, 24]])
def test_a_padded_batch_gives_each_token_its_unpadded_bits(tmp_path, lengths):
    """What a graph replays, run eagerly on the CPU by the Triton backend's kernels (``TRITON_INTERPRET=1``): the
    batch padded to ``buckets``' size, with a pad sequence and the attention's grid at the padded longest sequence
    (``PaddedBatch.run``), gives every real token the unpadded pass's log-prob and entropy, bit for bit."""
    from rlk_models.modeling.logprob_graphs import PaddedBatch

    model, ids, cu = _interpreted(tmp_path, lengths, seed=1)
    t_pad, n_seq, longest = buckets(lengths, 64)
    batch = PaddedBatch.empty(t_pad, n_seq, longest, "cpu")
    with torch.no_grad():
        want = model.packed_token_logprobs(ids, cu, return_entropy=True)
        valid = batch.fill(ids, cu)
        logp, ent = batch.run(model, True)
    t = ids.numel()
    assert torch.equal(torch.where(valid, logp[:t], 0.0), want[0]) and torch.equal(ent[:t], want[1])
    assert batch.cu.tolist() == [*cu.tolist(), t_pad] and batch.positions[t:].eq(0).all()


@pytest.mark.parametrize("lengths", [[5, 17, 3], [40, 0, 30]])
def test_a_padded_batch_with_selected_head_rows_gives_the_scored_tokens_their_bits(tmp_path, lengths):
    """A graph of selected head rows (``PaddedBatch(rows=...)``, what ``score_mask`` runs), eagerly on the CPU by
    the Triton backend's kernels (interpreter, float32): ``fill`` puts the scored tokens' rows first, all rows
    distinct; every scored token gets the unpadded pass's log-prob and entropy bit for bit, every row the head
    skipped 0; and the gradient owes nothing to the unscored tokens' targets."""
    from rlk_models.modeling.logprob_graphs import PaddedBatch

    model, ids, cu = _interpreted(tmp_path, lengths, seed=3)
    t = ids.numel()
    score = torch.zeros(t, dtype=torch.bool)
    score[1::3] = True
    t_pad, n_seq, longest = buckets(lengths, 64)
    rows = scored_rows(int(score.sum()), t_pad)
    assert rows is not None and rows < t_pad
    batch = PaddedBatch.empty(t_pad, n_seq, longest, "cpu", rows)
    with torch.no_grad():
        want = model.packed_token_logprobs(ids, cu, return_entropy=True)
        keep = batch.fill(ids, cu, score)
    picked = batch.rows.tolist()
    assert picked[:int(score.sum())] == torch.nonzero(score)[:, 0].tolist() and len(set(picked)) == rows
    logp, ent = batch.run(model, True)
    assert torch.equal(keep, score & (want[0] != 0))
    assert torch.equal(torch.where(keep, logp[:t], 0.0).detach(), torch.where(keep, want[0], 0.0))
    unpicked = torch.ones(t_pad, dtype=torch.bool)
    unpicked[batch.rows] = False
    assert torch.equal(ent[:t][score].detach(), want[1][score]) and bool((logp[unpicked] == 0).all())
    assert bool((ent[unpicked] == 0).all())
    params = list(model.parameters())
    grads = []
    for other in (0, 1):  # other targets at the unscored rows: the same gradients
        if other:
            batch.targets[~torch.cat([score, torch.zeros(t_pad - t, dtype=torch.bool)])] = 1
        logp = batch.run(model, False)[0]
        grads.append(torch.autograd.grad(torch.where(keep, logp[:t], 0.0).sum(), params))
    differ = [name for (name, _), a, b in zip(model.named_parameters(), *grads) if not torch.equal(a, b)]
    assert not differ, differ
    with pytest.raises(ValueError, match="needs the score mask"):
        batch.fill(ids, cu)


@pytest.mark.parametrize("lengths", [[5, 17, 3], [40, 0, 7]])
def test_a_padded_batchs_gradients_owe_nothing_to_its_pad_tokens(tmp_path, lengths):
    """What a training graph replays, eagerly on the CPU by the Triton backend's kernels (interpreter, float32): the
    padded batch's log-probs are the unpadded pass's, and its backward (the pad tokens' log-probs given zero
    gradient) owes nothing to the pad tokens -- other pad ids and positions leave every gradient bitwise unchanged.
    (Not the unpadded backward's bits: the backward's sums over tokens are not batch-invariant, ops/CONTRACT.md.)"""
    from rlk_models.modeling.logprob_graphs import PaddedBatch

    model, ids, cu = _interpreted(tmp_path, lengths, seed=2)
    g = torch.Generator().manual_seed(len(lengths))
    t = ids.numel()
    weights = torch.randn(t, generator=g)
    params = list(model.parameters())
    with torch.no_grad():
        want = model.packed_token_logprobs(ids, cu)
    batch = PaddedBatch.empty(*buckets(lengths, 128), "cpu")
    with torch.no_grad():
        valid = batch.fill(ids, cu)
    grads = []
    for pad_ids in (None, torch.randint(0, model.config.vocab_size, (batch.ids.numel() - t,), generator=g)):
        if pad_ids is not None:  # other pad tokens, at other positions
            batch.ids[t:] = pad_ids
            batch.positions[t:] = torch.arange(pad_ids.numel())
        logp = batch.run(model, False)[0]
        got = torch.where(valid, logp[:t], torch.zeros_like(logp[:t]))
        assert torch.equal(got.detach(), want)
        grads.append(torch.autograd.grad((got * weights).sum(), params))
    differ = [name for (name, _), a, b in zip(model.named_parameters(), *grads) if not torch.equal(a, b)]
    assert not differ, differ


def test_fresh_leaves_alias_the_parameters_and_give_their_gradients():
    """``fresh_leaves`` (what the training graphs capture over): new leaves over the parameters' memory, one per
    tied parameter, the same log-probs and the parameters' gradients bitwise, the modules restored on exit (an
    error inside too); an in-place update of a parameter is what the leaf reads."""
    from rlk_models.modeling.logprob_graphs import fresh_leaves
    from rlk_models.qwen3 import FAMILY, RLKQwen3Config, RLKQwen3ForCausalLM

    torch.manual_seed(0)
    model = RLKQwen3ForCausalLM(RLKQwen3Config(vocab_size=96, **{**FAMILY.tiny, "tie_word_embeddings": True}))
    params = list(model.parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied: one parameter
    ids, cu = torch.randint(0, 96, (20,)), torch.tensor([0, 7, 20])
    logp = model.packed_token_logprobs(ids, cu)
    want = torch.autograd.grad(logp.sum(), params)
    with fresh_leaves(model, params) as leaves:
        assert len(leaves) == len(params) and all(a is not b for a, b in zip(leaves, params))
        assert list(model.parameters()) == leaves and model.lm_head.weight is model.model.embed_tokens.weight
        assert all(a.data_ptr() == b.data_ptr() and a.is_leaf and a.requires_grad for a, b in zip(leaves, params))
        got_logp = model.packed_token_logprobs(ids, cu)
        got = torch.autograd.grad(got_logp.sum(), leaves)
        with torch.no_grad():
            params[1].mul_(0.5)
        assert torch.equal(leaves[1], params[1])
    assert torch.equal(got_logp, logp) and all(torch.equal(a, b) for a, b in zip(got, want))
    assert all(a is b for a, b in zip(model.parameters(), params))
    with pytest.raises(RuntimeError, match="inside"), fresh_leaves(model, params[:2]):
        raise RuntimeError("inside")
    assert all(a is b for a, b in zip(model.parameters(), params))


def _tiny_tied():
    from rlk_models.qwen3 import FAMILY, RLKQwen3Config, RLKQwen3ForCausalLM

    return RLKQwen3ForCausalLM(RLKQwen3Config(vocab_size=96, **{**FAMILY.tiny, "tie_word_embeddings": True}))


def _eagerly_replayed(model, buffers):
    """``_Replay`` with its forward and backward graphs run eagerly (the backward graph's ops: the leaves' gradients
    added into ``buffers`` in place): ``apply(ids, cu, *params)`` gives the packed log-probs."""
    from rlk_models.modeling.logprob_graphs import fresh_leaves

    params = list(model.parameters())
    used = [True] * len(params)

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, ids, cu, *ps):
            ctx.ids, ctx.cu = ids, cu
            with torch.no_grad():
                return model.packed_token_logprobs(ids, cu)

        @staticmethod
        def backward(ctx, grad):
            def replay():
                with torch.enable_grad(), fresh_leaves(model, params) as leaves:
                    logp = model.packed_token_logprobs(ctx.ids, ctx.cu)
                    torch.autograd.backward(logp, grad, inputs=buffers.attach(leaves, used))
            return (None, None, *buffers.collect(params, used, replay, [n for n, _ in ctx.next_functions[2:]]))

    return Graphed


def test_grad_buffers_leave_the_eager_gradients_in_grad():
    """``GradBuffers`` (where the backward graphs leave the gradients) under every way a backward meets them, its
    replay run eagerly here (the backward graph's ops: the leaves' gradients added into the buffers in place): a
    ``.grad`` of None gets its buffer holding the eager gradient; one that is its buffer accumulates as eager's
    does; a kept old ``.grad`` stays as it was; another tensor as ``.grad`` gets the gradient added in place;
    ``autograd.grad``, ``backward(inputs=...)`` and a tensor hook get the eager gradients handed to autograd. Each
    bitwise against the eager backward of the same weighted log-probs."""
    from rlk_models.modeling.logprob_graphs import GradBuffers

    torch.manual_seed(0)
    model = _tiny_tied()
    params = list(model.parameters())
    buffers = GradBuffers(params)
    Graphed = _eagerly_replayed(model, buffers)
    batches = [(torch.randint(0, 96, (20,)), torch.tensor([0, 7, 20]), torch.randn(20)) for _ in range(3)]

    def loss(i, graphed):
        ids, cu, w = batches[i]
        return ((Graphed.apply(ids, cu, *params) if graphed else model.packed_token_logprobs(ids, cu)) * w).sum()

    def eager(*steps):
        model.zero_grad(set_to_none=True)
        for i in steps:
            loss(i, False).backward()
        out = [p.grad.clone() for p in params]
        model.zero_grad(set_to_none=True)
        return out

    def same(a, b):
        return all(torch.equal(x, y) for x, y in zip(a, b))

    want_0, want_01, want_2 = eager(0), eager(0, 1), eager(2)
    loss(0, True).backward()  # .grad None: the buffers, holding the gradients
    assert same([p.grad for p in params], want_0)
    assert all(p.grad.data_ptr() == b.data_ptr() for p, b in zip(params, buffers.store))
    loss(1, True).backward()  # accumulated in place
    assert same([p.grad for p in params], want_01)
    assert all(p.grad.data_ptr() == b.data_ptr() for p, b in zip(params, buffers.store))
    kept = [p.grad for p in params]
    model.zero_grad(set_to_none=True)
    loss(2, True).backward()  # the kept gradients moved out of the buffers before they are written
    assert same(kept, want_01) and same([p.grad for p in params], want_2)
    assert all(k.data_ptr() != b.data_ptr() for k, b in zip(kept, buffers.store))

    model.zero_grad(set_to_none=True)
    loss(0, False).backward()  # eager gradients in .grad, then a graphed backward adds into those very tensors
    theirs = [p.grad for p in params]
    loss(1, True).backward()
    assert all(p.grad is t for p, t in zip(params, theirs)) and same(theirs, want_01)

    model.zero_grad(set_to_none=True)
    got = torch.autograd.grad(loss(2, True), params)  # handed to autograd; .grad untouched
    assert same(got, want_2) and all(p.grad is None for p in params)
    loss(0, True).backward(inputs=params[:3])
    assert same([p.grad for p in params[:3]], want_0[:3]) and all(p.grad is None for p in params[3:])
    model.zero_grad(set_to_none=True)
    hook = params[1].register_hook(lambda g: g * 2)
    loss(2, True).backward()
    hook.remove()
    assert torch.equal(params[1].grad, want_2[1] * 2) and same([p.grad for p in params[2:]], want_2[2:])


def _ddp_rank(rank: int, world: int, init_file: str, bucket_view: bool) -> None:
    """One rank of ``test_grad_buffers_feed_ddps_reducer`` (gloo): raises if its gradients differ."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from rlk_models.modeling.logprob_graphs import GradBuffers

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # the same weights on every rank
        model = _tiny_tied()
        params = list(model.parameters())
        graphed = _eagerly_replayed(model, GradBuffers(params))

        class Pass(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, ids, cu, replayed):
                return graphed.apply(ids, cu, *params) if replayed else model.packed_token_logprobs(ids, cu)

        ddp = DistributedDataParallel(Pass(), gradient_as_bucket_view=bucket_view)
        g = torch.Generator().manual_seed(rank)  # each rank its own batches: the all-reduce matters
        for step in range(3):
            ids, w = torch.randint(0, 96, (20,), generator=g), torch.randn(20, generator=g)
            cu = torch.tensor([0, 7, 20])
            got = []
            for replayed in (False, True):
                (ddp(ids, cu, replayed) * w).sum().backward()
                got.append([p.grad.clone() for p in params])
                model.zero_grad(set_to_none=not bucket_view)  # with bucket views, DDP's buckets stay the .grad
            differ = [name for (name, _), a, b in zip(model.named_parameters(), *got) if not torch.equal(a, b)]
            assert not differ, (rank, step, differ)
        # DDP's reducer freed while the group lives, and no rank leaving before the others are done: a DDP object
        # freed after destroy_process_group (or past a rank that exited) can hang in its destructor
        del ddp
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("bucket_view", [False, True])
def test_grad_buffers_feed_ddps_reducer(bucket_view, tmp_path):
    """Under DistributedDataParallel (2 CPU ranks, gloo; ``RLKGRPOTrainer(cuda_graphs=True)`` under ``accelerate
    launch``): the graphed backward leaves its gradients in ``.grad`` and hands autograd none, yet autograd still runs
    each parameter's accumulation node, whose hook -- DDP's reducer -- reads ``.grad`` and all-reduces it. The
    gradients each rank ends with (the ranks' mean, its batches differing) are the eager DDP backward's, bitwise,
    step after step, with and without DDP's ``.grad`` buckets (``gradient_as_bucket_view``). The replay runs eagerly
    here; the graphs' own run inside DDP: tests/gpu/test_logprob_graphs_cuda.py."""
    torch.multiprocessing.spawn(_ddp_rank, args=(2, str(tmp_path / "init"), bucket_view), nprocs=2)
