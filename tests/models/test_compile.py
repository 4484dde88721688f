"""torch.compile around the training class keeps its bits: its entry points run eagerly inside a
compiled caller (``torch.compiler.disable``). Without that, Inductor fused and reordered the
reference ops and the loss, a gradient and the token log-probs all changed (tiny Qwen3, session 6)."""

import torch
from transformers import AutoModelForCausalLM


def test_compiled_callers_get_the_eager_bits(checkpoints):
    model = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.bfloat16)
    ids = torch.randint(0, model.config.vocab_size, (3, 40), generator=torch.Generator().manual_seed(0))
    weight = model.model.layers[0].mlp.down_proj.weight

    def step(m):
        out = m(input_ids=ids, labels=ids)
        return out.loss.detach(), torch.autograd.grad(out.loss, [weight])[0]

    want, got = step(model), step(torch.compile(model))  # as a trainer's torch_compile=True does
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with torch.no_grad():
        lp = model.token_logprobs(ids)
        assert torch.equal(torch.compile(lambda x: model.token_logprobs(x) * 1.0)(ids), lp)
