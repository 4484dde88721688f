"""Engine-side checks run in a fresh process each (``python -m tests.vllm.worker NAME CKPT``):
an in-process vLLM engine changes process-wide state (threads, torch.distributed), so the test
process itself never hosts one. Prints one JSON object on the last line."""

import json
import sys

import torch


def weight_sync(ckpt: str) -> dict:
    """Several updates in a row: perturb every training weight, push, generate (twice, the
    second call hitting the prefix cache), compare bitwise. Before the first push the engine
    still has the old weights: that comparison must mismatch, or the check could not fail."""
    from transformers import AutoModelForCausalLM
    from vllm.inputs import TokensPrompt

    from rlk_models.rollout import engine, parity
    from rlk_models.rollout.sync import engine_in_process, push_weights

    engine.in_process_env()
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).eval()
    if torch.cuda.is_available():
        model = model.cuda()
    llm = engine.make_llm(ckpt, enable_prefix_caching=True, block_size=16)
    prompts = parity.mixed_prompts(model.config.vocab_size, n=8)
    g = torch.Generator().manual_seed(0)
    results = []
    for step in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_((torch.randn(p.shape, generator=g) * 0.02).to(p.device, p.dtype))
        if step == 0:
            stale = parity.Report("stale")
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                                parity.sampling_params("temp1", 6, True), use_tqdm=False)
            parity.compare(model, prompts, outs, stale)
            results.append({"update": "none", **stale.__dict__})
        n = push_weights(llm, model)
        rep = parity.Report(f"update{step}")
        for call in range(2):
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                                parity.sampling_params("temp1", 6, call == 0), use_tqdm=False)
            parity.compare(model, prompts, outs, rep)
        results.append({"update": step, "tensors": n, **rep.__dict__})
    return {"results": results, "in_process": engine_in_process(llm)}


def fail_closed(ckpt: str) -> dict:
    from vllm import LLM

    from rlk_models.rollout import engine

    engine.in_process_env()
    try:
        LLM(model=ckpt, max_model_len=256, enforce_eager=True)  # default logprobs_mode
    except Exception as e:  # vLLM may wrap the model's error
        return {"error": f"{type(e).__name__}: {e}"}
    return {"error": None}


def push_refusals(ckpt: str) -> dict:
    """Each bad push must be refused, naming the tensor, and leave the engine serving the old
    weights bit for bit; then a good push of changed weights must give the new model's bits."""
    from transformers import AutoModelForCausalLM
    from vllm.inputs import TokensPrompt

    from rlk_models.rollout import engine, parity
    from rlk_models.rollout.sync import WeightSyncError, push_weights

    engine.in_process_env()
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).eval()
    llm = engine.make_llm(ckpt)
    prompts = parity.mixed_prompts(model.config.vocab_size, n=6)

    def parity_with(m) -> dict:
        rep = parity.Report("check")
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                            parity.sampling_params("temp1", 6, True), use_tqdm=False)
        parity.compare(m, prompts, outs, rep)
        return {"mismatch_count": rep.mismatch_count, "tokens": rep.tokens}

    good = {n: t.detach().clone() for n, t in model.named_parameters()}
    first = next(iter(good))
    down = "model.layers.1.mlp.down_proj.weight"
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    bad_sets = {
        "wrong_shape": {**good, down: good[down][:, :-1]},
        "unknown_name": {**good, "model.layers.9.mlp.down_proj.weight": good[down]},
        "hf_layout": {**{n: t for n, t in good.items() if n != qkv},
                      **dict(zip([qkv.replace("qkv", x) for x in "qkv"], good[qkv].split(
                          [model.config.num_attention_heads * model.config.head_dim,
                           model.config.num_key_value_heads * model.config.head_dim,
                           model.config.num_key_value_heads * model.config.head_dim])))},
        "missing_one": {n: t for n, t in good.items() if n != down},
        "nan": {**good, down: good[down].clone().index_fill_(0, torch.tensor([0]), float("nan"))},
        "wrong_dtype": {**good, first: good[first].float()},
    }
    out = {"before": parity_with(model), "refused": {}}
    for name, sd in bad_sets.items():
        changed = {n: (t + 0.01 if t.is_floating_point() and n != down else t) for n, t in sd.items()}
        try:
            push_weights(llm, changed)
            err = None
        except WeightSyncError as e:
            err = str(e)
        out["refused"][name] = {"error": err, **parity_with(model)}  # still the old weights?
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02)
    out["good_push"] = {"tensors": push_weights(llm, model), **parity_with(model)}
    return out


def push_state_dict(ckpt: str) -> dict:
    """Push ``model.state_dict()`` (which lists a tied lm_head too) after an update: parity."""
    from transformers import AutoModelForCausalLM
    from vllm.inputs import TokensPrompt

    from rlk_models.rollout import engine, parity
    from rlk_models.rollout.sync import push_weights

    engine.in_process_env()
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).eval()
    llm = engine.make_llm(ckpt)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02)
    n = push_weights(llm, model.state_dict())
    prompts = parity.mixed_prompts(model.config.vocab_size, n=6)
    rep = parity.Report("state_dict")
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                        parity.sampling_params("temp1", 6, True), use_tqdm=False)
    parity.compare(model, prompts, outs, rep)
    return {"tensors": n, "tied": bool(model.config.tie_word_embeddings), **rep.__dict__}


def bisect_planted(ckpt: str) -> dict:
    """Trace the same tokens through the vLLM engine, the clean training class and a training
    class whose layer-1 down_proj is plain torch; report what the bisector names."""
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from rlk_models.cli.bisect import first_divergence, run_trace

    tokens = list(range(3, 90, 4))
    engine, lp_engine = run_trace(f"vllm:{ckpt}:chunked_prefill_16", tokens)
    clean, lp_clean = run_trace(f"train:{ckpt}", tokens)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    lin = model.model.layers[1].mlp.down_proj
    lin.forward = lambda x: F.linear(x, lin.weight, lin.bias)
    planted, _ = run_trace(f"train:{ckpt}", tokens, model=model)
    d_clean, d_planted = first_divergence(engine, clean), first_divergence(engine, planted)
    return {"records": len(engine.records), "clean": str(d_clean) if d_clean else None,
            "clean_logprobs_equal": bool(torch.equal(lp_engine, lp_clean)),
            "planted_record": d_planted.record if d_planted else None, "planted": str(d_planted)}


def vllm_load(ckpt: str) -> dict:
    from rlk_models.rollout import engine

    engine.in_process_env()
    try:
        engine.close_llm(engine.make_llm(ckpt, max_model_len=256))
    except Exception as e:  # vLLM may wrap the model's error
        return {"error": f"{type(e).__name__}: {e}"}
    return {"error": None}


if __name__ == "__main__":
    out = {"weight_sync": weight_sync, "fail_closed": fail_closed,
           "bisect_planted": bisect_planted, "vllm_load": vllm_load, "push_refusals": push_refusals,
           "push_state_dict": push_state_dict}[
        sys.argv[1]](sys.argv[2])
    print(json.dumps(out))
