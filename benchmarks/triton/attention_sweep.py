"""H200 sweep for the Triton attention (training varlen + vLLM-paged), one call, log under $OUT.

1. Per-token bitwise equality (bf16, Qwen3-8B heads 32/8, D=128, sequences of 1..2047 tokens):
   full-sequence training attention vs (a) one-step prefill through the paged cache, (b)
   token-by-token decode, every sequence decoding in the same launch, K/V written by slot
   mapping step by step into a NaN-filled cache, (c) chunked prefill with random chunk sizes
   mixed with other sequences' decodes in one launch -- for block sizes 16 and 128, random block
   tables, every paged BLOCK_M and training BLOCK_M candidate.
2. Backward: run-to-run identical; forward/backward accuracy vs float64 (and SDPA's for scale).
3. Whole model (``rlk_models.modeling.paged.PagedRunner``): token log-probs of the training
   class == the paged decode path, for tiny Qwen3 / Llama and a 2-layer Qwen3-8B-shaped model,
   block sizes 16 and 128; gradients run-to-run identical.
4. Speed vs ``scaled_dot_product_attention`` (flash) at B=8, 32/8 heads, S=4096, D=128: forward and
   forward+backward; paged decode at batch 64 x 4096 context: effective TB/s (K+V bytes read).

    python benchmarks/triton/attention_sweep.py [--skip-model] [--skip-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import random

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

from rlk_models.ops.paged import paged_steps, random_block_table
from rlk_models.ops.triton import attention as attn

HQ, HKV, D = 32, 8, 128
SCALE = D ** -0.5
TRAIN_CANDIDATES = [(64, 4, 3), (128, 8, 2), (64, 4, 2), (128, 8, 3), (64, 4, 4), (64, 8, 3)]
PAGED_CANDIDATES = [(64, 4, 2), (16, 4, 2), (32, 4, 2), (128, 8, 2), (64, 4, 3), (64, 4, 4), (64, 4, 5), (64, 8, 3),
                    (64, 8, 4)]


def log(*a):
    print(*a, flush=True)


def run_schedule(q, k, v, cu, lens, bs, cfg, chunker, gen):
    """Write K/V and attend step by step (``paged_steps``): each step every unfinished sequence
    takes chunker(remaining) tokens (1 = decode), all in one launch, into a NaN-filled cache
    with a random block table. Returns [T, Hq, D]."""
    bt, nb = random_block_table(lens, bs, gen, spare=5, device="cuda")
    cache = torch.full((nb, HKV, bs, 2 * D), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = torch.full_like(q, float("nan"))
    for idx, rows, seq_lens, qsl in paged_steps(cache, k, v, cu, lens, bt, chunker):
        out[idx] = attn.paged_attention(q[idx], cache, rows, seq_lens, qsl, SCALE, config=cfg)
    return out


def invariance(res, gen):
    lens = [1, 7, 64, 65, 300, 1000, 2047]
    t = sum(lens)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(t, HQ, D, device="cuda", generator=g).bfloat16()
    k = torch.randn(t, HKV, D, device="cuda", generator=g).bfloat16()
    v = torch.randn(t, HKV, D, device="cuda", generator=g).bfloat16()
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device="cuda")
    train = {c: attn.varlen_attention(q, k, v, cu, SCALE, config=c) for c in TRAIN_CANDIDATES}
    ref = train[attn.TRAIN_CONFIG]
    r = {"train_configs_equal": {str(c): torch.equal(o, ref) for c, o in train.items()},
         "train_run_to_run": torch.equal(attn.varlen_attention(q, k, v, cu, SCALE), ref),
         "train_alone_equals_packed": all(
             torch.equal(attn.varlen_attention(q[a:b], k[a:b], v[a:b], torch.tensor([0, b - a], device="cuda"), SCALE),
                         ref[a:b]) for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()))}
    log("training:", r)
    rng = random.Random(0)
    paged = {}
    for bs in (16, 128):
        for cfg in PAGED_CANDIDATES:
            row = {}
            row["prefill_one_step"] = torch.equal(run_schedule(q, k, v, cu, lens, bs, cfg, lambda n: n, gen), ref)
            row["decode_token_by_token"] = torch.equal(run_schedule(q, k, v, cu, lens, bs, cfg, lambda n: 1, gen), ref)
            row["chunked_mixed"] = torch.equal(
                run_schedule(q, k, v, cu, lens, bs, cfg, lambda n: rng.choice([1, 1, 3, 16, 64, 100, 257]), gen), ref)
            paged[f"block_size={bs} cfg={cfg}"] = row
            log(f"paged block_size={bs} cfg={cfg}: {row}")
    r["paged"] = paged
    # accuracy vs float64 and backward determinism on the shorter sequences
    sl = slice(0, sum(lens[:6]))
    qs, ks, vs = q[sl], k[sl], v[sl]
    cus = cu[:7]
    qg, kg, vg = (x.clone().requires_grad_() for x in (qs, ks, vs))
    do = torch.randn_like(qs)
    grads = [torch.autograd.grad(attn.varlen_attention(qg, kg, vg, cus, SCALE), [qg, kg, vg], do) for _ in range(2)]
    r["bwd_run_to_run"] = all(torch.equal(a, b) for a, b in zip(*grads))
    q64, k64, v64 = (x.double().requires_grad_() for x in (qs, ks, vs))
    outs = []
    for a, b in zip(cus[:-1].tolist(), cus[1:].tolist()):
        qq = q64[a:b].transpose(0, 1)
        kk = k64[a:b].repeat_interleave(HQ // HKV, 1).transpose(0, 1)
        vv = v64[a:b].repeat_interleave(HQ // HKV, 1).transpose(0, 1)
        outs.append(F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, scale=SCALE).transpose(0, 1))
    o64 = torch.cat(outs)
    g64 = torch.autograd.grad(o64, [q64, k64, v64], do.double())

    def rel(a, b):
        return float((a.double() - b).norm() / b.norm())

    r["fwd_rel_err_vs_fp64"] = rel(ref[sl], o64.detach())
    r["bwd_rel_err_vs_fp64"] = {n: rel(a, b) for n, a, b in zip("qkv", grads[0], g64)}
    log("accuracy/backward:", {kk: vv for kk, vv in r.items() if kk.startswith(("bwd", "fwd"))})
    res["invariance"] = r


def model_parity(res):
    from rlk_models.llama import RLKLlamaConfig, RLKLlamaForCausalLM
    from rlk_models.modeling.paged import PagedRunner, training_logprobs
    from rlk_models.qwen3 import RLKQwen3Config, RLKQwen3ForCausalLM
    from rlk_models.tiny import TINY_LLAMA, TINY_QWEN3

    qwen8b_2l = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=2, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
                     rms_norm_eps=1e-6, initializer_range=0.02)
    cases = {"tiny_qwen3": (RLKQwen3Config, RLKQwen3ForCausalLM, dict(TINY_QWEN3, vocab_size=512)),
             "tiny_llama": (RLKLlamaConfig, RLKLlamaForCausalLM, dict(TINY_LLAMA, vocab_size=512)),
             "qwen3_8b_shape_2_layers": (RLKQwen3Config, RLKQwen3ForCausalLM, qwen8b_2l)}
    out = {}
    for name, (cfg_cls, cls, kw) in cases.items():
        torch.manual_seed(0)
        cfg = cfg_cls(**kw, rlk_backend="triton")
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            model = cls(cfg)
        torch.set_default_dtype(torch.float32)
        model.eval()
        g = torch.Generator().manual_seed(1)
        lens = [300, 2, 129, 64, 75] if "8b" in name else [200, 3, 75, 40, 129]
        seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in lens]
        want = training_logprobs(model, seqs)
        row = {}
        for bs in (16, 128):
            runner = PagedRunner(model, block_size=bs, seed=bs)
            prefill = [min(p, n - 2) for p, n in zip([250, 1, 100, 0, 17], lens)]
            got = runner.logprobs(seqs, prefill_lens=prefill, token_budget=96, arrivals=[0, 1, 1, 3, 6])
            mism = sum(int((a != b).sum()) for a, b in zip(want, got))
            row[f"block_size={bs}"] = {"mismatch_count": mism, "tokens": sum(len(a) for a in want),
                                       "max_abs_diff": max(float((a - b).abs().max()) for a, b in zip(want, got) if len(a))}
            del runner
        ids = torch.tensor([t for s in seqs for t in s], device="cuda")
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device="cuda")
        model.train()
        grads = []
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            model.packed_token_logprobs(ids, cu).sum().backward()
            grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        row["grads_run_to_run"] = all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0])
        out[name] = row
        log(f"model {name}: {row}")
        del model, grads
        torch.cuda.empty_cache()
    res["model_parity"] = out


def bench(res):
    b, s = 8, 4096
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(b * s, HQ, D, device="cuda", generator=g).bfloat16()
    k = torch.randn(b * s, HKV, D, device="cuda", generator=g).bfloat16()
    v = torch.randn(b * s, HKV, D, device="cuda", generator=g).bfloat16()
    cu = torch.arange(0, b * s + 1, s, device="cuda")
    qs = q.view(b, s, HQ, D).transpose(1, 2)
    ks = k.view(b, s, HKV, D).repeat_interleave(HQ // HKV, 2).transpose(1, 2)
    vs = v.view(b, s, HKV, D).repeat_interleave(HQ // HKV, 2).transpose(1, 2)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(qq, kk, vv):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, scale=SCALE)

    flops = 4 * b * HQ * s * s * D / 2
    t_sdpa = do_bench(lambda: sdpa(qs, ks, vs), warmup=10, rep=50, return_mode="median")
    r = {"sdpa_fwd_ms": t_sdpa, "sdpa_fwd_tflops": flops / t_sdpa / 1e9, "fwd": {}}
    for c in TRAIN_CANDIDATES:
        try:
            t = do_bench(lambda: attn.varlen_attention(q, k, v, cu, SCALE, config=c), warmup=10, rep=50,
                         return_mode="median")
        except triton.runtime.errors.OutOfResources:
            continue
        r["fwd"][str(c)] = {"ms": t, "ratio_vs_sdpa": t / t_sdpa}
        log(f"fwd {c}: {t:.3f} ms vs SDPA {t_sdpa:.3f} ms ({t / t_sdpa:.2f}x)")
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    qsg, ksg, vsg = (x.detach().clone().requires_grad_() for x in (qs, ks, vs))
    do = torch.randn_like(q)
    dos = do.view(b, s, HQ, D).transpose(1, 2)
    t_sdpa_fb = do_bench(lambda: torch.autograd.grad(sdpa(qsg, ksg, vsg), [qsg, ksg, vsg], dos), warmup=5, rep=30,
                         return_mode="median")
    t_fb = do_bench(lambda: torch.autograd.grad(attn.varlen_attention(qg, kg, vg, cu, SCALE), [qg, kg, vg], do),
                    warmup=5, rep=30, return_mode="median")
    r["fwd_bwd"] = {"ours_ms": t_fb, "sdpa_ms": t_sdpa_fb, "ratio_vs_sdpa": t_fb / t_sdpa_fb}
    log(f"fwd+bwd: ours {t_fb:.3f} ms vs SDPA {t_sdpa_fb:.3f} ms ({t_fb / t_sdpa_fb:.2f}x)")
    del qg, kg, vg, qsg, ksg, vsg, ks, vs
    # paged decode: 64 sequences x 4096 context
    nseq, ctx = 64, 4096
    gen = torch.Generator().manual_seed(5)
    r["paged_decode"] = {}
    qd = torch.randn(nseq, HQ, D, device="cuda", generator=g).bfloat16()
    for bs in (16, 128):
        bt, nb = random_block_table([ctx] * nseq, bs, gen, spare=5, device="cuda")
        cache = torch.randn(nb, HKV, bs, 2 * D, device="cuda", generator=g).bfloat16()
        lens_t = torch.full((nseq,), ctx, device="cuda", dtype=torch.int32)
        qsl = torch.arange(nseq + 1, device="cuda", dtype=torch.int32)
        nbytes = nseq * ctx * HKV * 2 * D * 2
        for c in PAGED_CANDIDATES:
            t = do_bench(lambda: attn.paged_attention(qd, cache, bt, lens_t, qsl, SCALE, config=c), warmup=10, rep=50,
                         return_mode="median")
            r["paged_decode"][f"block_size={bs} cfg={c}"] = {"ms": t, "TB_per_s": nbytes / t / 1e9}
            log(f"paged decode bs={bs} {c}: {t:.3f} ms, {nbytes / t / 1e9:.2f} TB/s")
        del cache
    res["bench"] = r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    args = ap.parse_args()
    res = {"info": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}}
    log(res["info"])
    invariance(res, torch.Generator().manual_seed(0))
    if not args.skip_model:
        model_parity(res)
    if not args.skip_bench:
        bench(res)
    with open(os.path.join(os.environ.get("OUT", "."), "attention_sweep.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
