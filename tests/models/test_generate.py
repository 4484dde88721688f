"""``generate()`` on the training class: KV-cached decoding through the backend's paged ops gives,
for every generated token, the log-prob ``token_logprobs`` gives for the finished sequence --
bitwise, for batches of mixed-length prompts, left- or right-padded, greedy and sampled -- and a
row's tokens do not depend on the rest of the batch."""

import pytest
import torch
from transformers import AutoModelForCausalLM

PROMPT_LENS = [5, 1, 9, 3]
NEW = 7


def _model(checkpoints, name):
    return AutoModelForCausalLM.from_pretrained(checkpoints[name][1], dtype=torch.bfloat16).eval()


def _prompts(vocab: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, vocab, (n,), generator=g) for n in PROMPT_LENS]


def _batch(prompts, side: str):
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        sl = slice(width - len(p), width) if side == "left" else slice(0, len(p))
        ids[b, sl], mask[b, sl] = p, 1
    return ids, mask


def _generate(model, ids, mask, sample: bool, **kw):
    if sample:
        torch.manual_seed(11)
        kw.update(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    else:
        kw.update(do_sample=False)
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, pad_token_id=0,
                          return_dict_in_generate=True, output_logits=True, **kw)


@pytest.mark.parametrize("name", ["qwen3", "llama_bias"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sampled"])
def test_generated_logits_equal_token_logprobs(checkpoints, name, side, sample):
    model = _model(checkpoints, name)
    prompts = _prompts(model.config.vocab_size)
    ids, mask = _batch(prompts, side)
    out = _generate(model, ids, mask, sample)
    width = ids.shape[1]
    for b, p in enumerate(prompts):
        new = out.sequences[b, width:]
        seq = torch.cat([p, new])
        want = model.token_logprobs(seq[None])[0, -NEW:]
        got = torch.stack([out.logits[t][b, new[t]] for t in range(NEW)])
        assert torch.equal(got, want.detach()), (b, got, want)
        if not sample:  # greedy: each token is the argmax of the training class's distribution
            with torch.no_grad():
                full = model.ops.full_logprobs(model.packed_hidden_states(seq, torch.tensor([0, len(seq)])),
                                               model.lm_head.weight, model.config.vocab_size)
            assert torch.equal(new, full[len(p) - 1:-1].argmax(-1))


def test_a_rows_tokens_do_not_depend_on_its_batch(checkpoints):
    model = _model(checkpoints, "qwen3")
    prompts = _prompts(model.config.vocab_size)
    ids, mask = _batch(prompts, "left")
    together = _generate(model, ids, mask, sample=False)
    for b, p in enumerate(prompts):
        alone = _generate(model, p[None], torch.ones(1, len(p), dtype=torch.long), sample=False)
        assert torch.equal(alone.sequences[0, len(p):], together.sequences[b, ids.shape[1]:])
        for t in range(NEW):
            assert torch.equal(alone.logits[t][0], together.logits[t][b])


def test_eos_stops_a_row_and_the_rest_is_padding(checkpoints):
    model = _model(checkpoints, "qwen3")
    prompts = _prompts(model.config.vocab_size)
    ids, mask = _batch(prompts, "left")
    free = _generate(model, ids, mask, sample=False)
    eos = int(free.sequences[2, ids.shape[1] + 2])  # row 2's third new token
    out = _generate(model, ids, mask, sample=False, eos_token_id=eos)
    row = out.sequences[2, ids.shape[1]:]
    assert int(row[2]) == eos and bool((row[3:] == 0).all())
    assert torch.equal(row[:3], free.sequences[2, ids.shape[1]:ids.shape[1] + 3])


def test_generate_refuses_what_the_cache_cannot_do(checkpoints):
    model = _model(checkpoints, "qwen3")
    ids = torch.tensor([[3, 4, 5]])
    with pytest.raises(ValueError, match="beam search"):
        model.generate(input_ids=ids, max_new_tokens=2, num_beams=2)
    with pytest.raises(ValueError, match="use_cache=False"):
        model.generate(input_ids=ids, max_new_tokens=2, use_cache=False)
    with pytest.raises(ValueError, match="labels"):
        from transformers import DynamicCache

        model(input_ids=ids, past_key_values=DynamicCache(), labels=ids)


def test_long_generation_grows_the_cache_and_keeps_the_bits(checkpoints):
    """70 new tokens: the paged cache grows past its first blocks (1 -> 2 -> 4 -> 8 per row)."""
    model = _model(checkpoints, "qwen3")
    prompts = _prompts(model.config.vocab_size)
    ids, mask = _batch(prompts, "left")
    torch.manual_seed(3)
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=70, do_sample=True, top_k=0,
                         pad_token_id=0, return_dict_in_generate=True, output_logits=True)
    for b, p in enumerate(prompts):
        new = out.sequences[b, ids.shape[1]:]
        want = model.token_logprobs(torch.cat([p, new])[None])[0, -70:]
        got = torch.stack([out.logits[t][b, new[t]] for t in range(70)])
        assert torch.equal(got, want.detach())
