"""The training classes behave like transformers models."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from rlk_models import RLKLlamaForCausalLM, RLKQwen3Config, RLKQwen3ForCausalLM
from rlk_models.modeling.config import UnsupportedConfig
from rlk_models.ops import BackendUnavailable
from rlk_models.ops.reference.primitives import tree_sum


@pytest.fixture(scope="module")
def qwen(checkpoints):
    return AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.float32,
                                                rlk_check_fingerprint=False)


def batch(vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (3, 24), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 20:], mask[2, 9:] = 0, 0
    return ids, mask


def test_auto_classes_and_save_load_roundtrip(checkpoints, tmp_path):
    cfg = AutoConfig.from_pretrained(checkpoints["llama3"][1])
    assert type(cfg).__name__ == "RLKLlamaConfig" and cfg.rlk_backend == "reference"
    m = AutoModelForCausalLM.from_pretrained(checkpoints["llama3"][1])
    assert isinstance(m, RLKLlamaForCausalLM)
    m.save_pretrained(tmp_path / "saved")
    m2 = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    sd, sd2 = m.state_dict(), m2.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    ids, mask = batch(cfg.vocab_size)
    assert torch.equal(m.token_logprobs(ids, mask), m2.token_logprobs(ids, mask))


def test_tied_embeddings_share_storage(checkpoints):
    m = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3_tied"][1])
    assert m.lm_head.weight is m.model.embed_tokens.weight


def test_loss_is_mean_of_head_logprobs(qwen):
    ids, mask = batch(qwen.config.vocab_size)
    labels = ids.masked_fill(mask == 0, -100)
    labels[1, 5] = -100
    out = qwen(ids, attention_mask=mask, labels=labels)
    lp = qwen.token_logprobs(ids, mask)
    valid = labels[:, 1:] != -100
    assert torch.equal(out.loss, -tree_sum(lp[valid]) / valid.sum())
    out2 = qwen(ids, attention_mask=mask, labels=labels, num_items_in_batch=100)
    assert torch.equal(out2.loss, -tree_sum(lp[valid]) / 100)


def test_logits_layout_logits_to_keep_and_inputs_embeds(qwen):
    ids, mask = batch(qwen.config.vocab_size)
    out = qwen(ids, attention_mask=mask)
    assert out.logits.shape == (3, 24, qwen.config.vocab_size) and out.logits.dtype == torch.float32
    last = qwen(ids, logits_to_keep=1).logits
    assert last.shape == (3, 1, qwen.config.vocab_size)
    assert torch.equal(last[:, 0], qwen(ids).logits[:, -1])
    emb = qwen.get_input_embeddings()(ids)
    assert torch.equal(qwen(inputs_embeds=emb, attention_mask=mask).logits, out.logits)


def test_packed_position_ids_equal_padded_batch(qwen):
    ids, mask = batch(qwen.config.vocab_size)
    lengths = mask.sum(1).tolist()
    flat = torch.cat([ids[i, :n] for i, n in enumerate(lengths)])[None]
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    packed = qwen(flat, position_ids=pos).logits[0]
    padded = qwen(ids, attention_mask=mask).logits
    assert torch.equal(packed, padded[mask.bool()])


def test_gradient_checkpointing_gives_identical_gradients(checkpoints):
    ids, mask = batch(512, seed=1)

    def grads(gc):
        m = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.float32,
                                                rlk_check_fingerprint=False)
        if gc:
            m.gradient_checkpointing_enable()
        m.train()
        m(ids % m.config.vocab_size, attention_mask=mask, labels=ids % m.config.vocab_size).loss.backward()
        return {n: p.grad for n, p in m.named_parameters()}

    a, b = grads(False), grads(True)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_training_step_reduces_loss(checkpoints):
    m = AutoModelForCausalLM.from_pretrained(checkpoints["llama_bias"][1], dtype=torch.float32,
                                                rlk_check_fingerprint=False)
    ids, mask = batch(m.config.vocab_size, seed=2)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = m(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < losses[0] - 0.5


def test_training_after_a_first_pass_under_inference_mode(checkpoints):
    """An RL step's first pass is often the old policy's under ``torch.inference_mode``: what the model builds lazily
    there (the RoPE table) must not be an inference tensor, which the training pass's backward could not save."""
    m = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.float32, rlk_check_fingerprint=False)
    ids, mask = batch(m.config.vocab_size, seed=3)
    with torch.inference_mode():
        old = m.token_logprobs(ids, mask)
    logp = m.token_logprobs(ids, mask)
    logp.sum().backward()
    assert torch.equal(logp.detach(), old) and all(p.grad is not None for p in m.parameters())


def tiny_cfg(**kw):
    base = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
    return RLKQwen3Config(**{**base, **kw})


@pytest.mark.parametrize("kw, match", [
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 0}, "sliding"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}}, "rope"),
    ({"num_experts": 8}, "num_experts"),
    ({"rlk_backend": "cuda-magic"}, "rlk_backend"),
])
def test_unsupported_config_fields_are_named(kw, match):
    with pytest.raises(UnsupportedConfig, match=match):
        RLKQwen3ForCausalLM(tiny_cfg(**kw))


def test_unknown_backend_and_foreign_kv_cache_are_refused(qwen):
    from transformers import DynamicCache

    from rlk_models.ops import get_backend
    with pytest.raises(BackendUnavailable, match="unknown op backend"):
        get_backend("nope")
    with pytest.raises(ValueError, match="RLKCache"):
        qwen(torch.tensor([[1, 2]]), past_key_values=object())
    filled = DynamicCache()
    filled.update(torch.zeros(1, 1, 3, 16), torch.zeros(1, 1, 3, 16), 0)
    with pytest.raises(ValueError, match="RLKCache"):  # a cache some other model filled
        qwen(torch.tensor([[1, 2]]), past_key_values=filled)


def test_bad_inputs_give_clear_errors(qwen):
    with pytest.raises(IndexError, match="token ids"):
        qwen.token_logprobs(torch.tensor([[1, qwen.config.vocab_size]]))
    with pytest.raises(ValueError, match=r"cu_seqlens must rise from 0 to T=3, got \[0, 2\]"):
        qwen.packed_token_logprobs(torch.tensor([1, 2, 3]), torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="input_ids holds no tokens"):
        qwen.token_logprobs(torch.zeros(0, 4, dtype=torch.long))
    with pytest.raises(IndexError, match="position"):
        qwen.token_logprobs(torch.zeros(1, qwen.config.max_position_embeddings + 1, dtype=torch.long))
    v = qwen.config.vocab_size
    for bad in (v, -5):  # a label past the vocabulary, a negative one other than -100
        labels = torch.tensor([[1, 2, bad, -100]])
        with pytest.raises(IndexError, match=rf"labels must be -100 or lie in \[0, {v}\), got range \[{min(bad, 2)}, "
                                             rf"{max(bad, 2)}\]"):
            qwen(torch.tensor([[1, 2, 3, 4]]), labels=labels)


def test_incomplete_backend_is_refused_naming_what_is_missing():
    from rlk_models.ops import get_backend, register_backend

    register_backend("incomplete", "rlk_models.ops.reference.linear")  # a module with only the linear op
    with pytest.raises(BackendUnavailable, match=r"lacks \[.*'embedding'"):
        get_backend("incomplete")


def test_fused_lm_head_gives_token_logprobs_bits(qwen):
    """TRL's fused-LM-head protocol, natively: the labels' log-probs from the log-prob head, equal
    to token_logprobs where a label is set, 0 elsewhere; the same loss as forward(labels)."""
    ids = torch.tensor([[0, 0, 5, 6, 7, 8, 0], [1, 2, 3, 4, 9, 10, 11]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]])
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :4] = -100
    out = qwen(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    want = qwen.token_logprobs(ids, mask, return_entropy=True)
    f, t = False, True
    assert out.label_mask.tolist() == [[f, f, f, t, t, f], [f, f, f, t, t, t]]
    for got, w in zip((out.log_probs, out.entropy), want):
        assert torch.equal(got[out.label_mask], w[out.label_mask]) and bool((got[~out.label_mask] == 0).all())
    assert torch.equal(out.loss, qwen(input_ids=ids, attention_mask=mask, labels=labels).loss)
    out.loss.backward()
    assert qwen.lm_head.weight.grad is not None and bool(qwen.lm_head.weight.grad.abs().sum() > 0)
    with pytest.raises(ValueError, match="needs labels"):
        qwen(input_ids=ids, fused_lm_head=True)
    qwen.zero_grad(set_to_none=True)


def test_score_mask_gives_the_unmasked_bits_where_set_and_zeros_elsewhere(qwen):
    """``token_logprobs(..., score_mask=...)`` (an RL step's completion positions): the head runs over those rows
    only; each wanted entry (log-prob and entropy) is the unmasked pass's, bit for bit, every other entry 0; the
    gradient flows from the wanted entries alone. A mask of the wrong shape or dtype is refused by name."""
    ids, mask = batch(qwen.config.vocab_size, seed=3)
    g = torch.Generator().manual_seed(4)
    score = (torch.rand(3, 23, generator=g) < 0.4) & mask[:, 1:].bool()
    score[1, -1] = True  # the last position of a full row: it predicts a real token
    want = qwen.token_logprobs(ids, mask, return_entropy=True)
    got = qwen.token_logprobs(ids, mask, return_entropy=True, score_mask=score)
    for a, w in zip(got, want):
        assert torch.equal(a[score], w[score]) and bool((a[~score] == 0).all())
    weights = torch.randn(3, 23, generator=g)
    got[0].mul(weights).sum().backward()
    masked = [p.grad.clone() for p in qwen.parameters()]
    qwen.zero_grad(set_to_none=True)
    (want[0] * weights * score).sum().backward()  # the same loss through the unmasked pass (not its bits: other sums)
    for (name, p), a in zip(qwen.named_parameters(), masked):
        assert torch.allclose(a, p.grad, rtol=1e-4, atol=1e-6), name
    qwen.zero_grad(set_to_none=True)
    with pytest.raises(ValueError, match=r"score_mask must be a bool tensor of the output's shape \(3, 23\)"):
        qwen.token_logprobs(ids, mask, score_mask=score[:, 1:])
    with pytest.raises(ValueError, match="score_mask must be a bool tensor of input_ids' shape"):
        qwen.packed_token_logprobs(ids[0], torch.tensor([0, 24]), score_mask=score[0].long())


def test_hooked_down_proj_is_called_with_the_same_bits(checkpoints):
    """The training MLP fuses SiLU-mul and down_proj into one op, except where down_proj is
    observed: a forward hook on it then sees its input and output (rlk-bisect's records), and the
    loss and gradients are the fused path's bit for bit."""
    m = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.float32,
                                            rlk_check_fingerprint=False).train()
    ids, mask = batch(m.config.vocab_size, seed=4)
    down = m.model.layers[0].mlp.down_proj
    seen = []

    def run():
        m.zero_grad(set_to_none=True)
        loss = m(ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        return [loss] + [p.grad for p in m.parameters()]

    fused = run()
    handle = down.register_forward_hook(lambda mod, inp, out: seen.append((inp[0].shape[-1], out.shape[-1])))
    hooked = run()
    handle.remove()
    assert seen == [(m.config.intermediate_size, m.config.hidden_size)]  # once, on the product
    assert all(torch.equal(a, b) for a, b in zip(fused, hooked, strict=True))


@pytest.mark.parametrize("gc", [None, {"use_reentrant": True}, {"use_reentrant": False}])
def test_activations_rebuilt_in_backward_give_identical_gradients(checkpoints, monkeypatch, gc):
    """The down projection's input and both norms' outputs are not kept for the backward but
    rebuilt (``rlk_rebuild_activations``, the default): in the backward, two rms_norm calls a
    layer (the MLP's product is rebuilt inside ``silu_mul_linear``'s backward:
    tests/ops/test_contract.py), and the gradients are the kept activations' bit for bit -- alone
    and under either kind of gradient checkpointing (a non-reentrant one has saved-tensor hooks of
    its own, which ours leave in charge)."""
    from rlk_models.ops import get_backend

    ids, mask = batch(512, seed=3)
    ops = get_backend("reference")
    calls = {"rms_norm": 0}
    for name in calls:
        real = getattr(ops, name)

        def counted(*a, _real=real, _name=name, **kw):
            calls[_name] += 1
            return _real(*a, **kw)
        monkeypatch.setattr(ops, name, counted)

    def grads(rebuild):
        m = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.float32,
                                                rlk_check_fingerprint=False, rlk_rebuild_activations=rebuild)
        assert m.config.rlk_rebuild_activations is rebuild
        if gc is not None:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc)
        m.train()
        ids_v = ids % m.config.vocab_size
        loss = m(ids_v, attention_mask=mask, labels=ids_v).loss
        for k in calls:
            calls[k] = 0
        loss.backward()
        return {n: p.grad for n, p in m.named_parameters()}, dict(calls), m.config.num_hidden_layers

    kept, n_kept, layers = grads(False)
    rebuilt, n_rebuilt, _ = grads(True)
    assert all(torch.equal(kept[k], rebuilt[k]) for k in kept)
    # in the backward, the rebuilds (a reentrant checkpoint reruns each layer's forward too, in both
    # runs); under a non-reentrant checkpoint's own saved-tensor hooks (it keeps nothing of a layer)
    # ours stand aside, so nothing is rebuilt
    per_layer = 0 if gc == {"use_reentrant": False} else layers
    assert n_rebuilt["rms_norm"] - n_kept["rms_norm"] == 2 * per_layer
