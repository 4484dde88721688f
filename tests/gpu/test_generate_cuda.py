"""``generate()`` with the Triton backend on a CUDA GPU: the paged KV-cache decode gives every
generated token the log-prob ``token_logprobs`` gives for the finished sequence, bitwise (the CPU
version, reference backend: tests/models/test_generate.py). Marked ``gpu``."""

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("side", ["left", "right"])
def test_generate_on_cuda_equals_token_logprobs(tmp_path, side):
    from transformers import AutoModelForCausalLM

    from rlk_models.conversion import convert
    from rlk_models.testing.tiny import make_tiny_hf_checkpoint
    from tests.models.test_generate import NEW, _batch, _generate, _prompts

    hf = make_tiny_hf_checkpoint(tmp_path / "hf", "qwen3", seed=1)
    ckpt = convert(hf, tmp_path / "rlk", rlk_backend="triton", progress=False)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).cuda().eval()
    prompts = [p.cuda() for p in _prompts(model.config.vocab_size)]
    ids, mask = _batch([p.cpu() for p in prompts], side)
    out = _generate(model, ids.cuda(), mask.cuda(), sample=True)
    for b, p in enumerate(prompts):
        new = out.sequences[b, ids.shape[1]:]
        want = model.token_logprobs(torch.cat([p, new])[None])[0, -NEW:]
        got = torch.stack([out.logits[t][b, new[t]] for t in range(NEW)])
        assert torch.equal(got, want.detach()), (b, got, want)
