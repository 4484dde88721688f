"""H200 benchmark of the Triton attention (training varlen + vLLM-paged), bf16, Qwen3-8B heads
(32/8, D=128). Measures only (per-token bitwise equality of training, paged prefill, decode and
chunked steps for every candidate config, and of the whole model, is tests/gpu):

1. accuracy of forward and backward vs float64 (sequences of 1..1000 tokens);
2. speed vs ``scaled_dot_product_attention`` (flash) at B=8, S=4096: forward for every training
   candidate, forward + backward; paged decode at batch 64 x 4096 context for every paged
   candidate: effective TB/s (K+V bytes read);
3. ``--decode``: paged decode at the rollout engine's shapes (batch 64 and 256, contexts 288 to 8192,
   block size 16) for every paged candidate, each checked bitwise against the default and timed
   under CUDA graphs, against vLLM's FA3 (``vllm.vllm_flash_attn``, where importable) on the same
   contexts in its own cache layout. Session 14's 8B engine profile: a 256-sequence decode step
   costs 1.05x stock vLLM's GPU time at context ~65 and 1.12x at ~288, the difference growing with
   the context -- this is the kernel-level view of that.
4. ``--train``: the training step's attention at the Qwen3-1.7B (8 x 2048, 16/8 heads) and 8B (8 x 4096,
   32/8) shapes -- every forward candidate and every backward candidate (run to run, and the gradients
   against the first candidate's) against SDPA's cuDNN kernels, the ones stock transformers and Liger
   run on the H200 (its FA2 kernels, the baseline of 2., are recorded beside them).

    python benchmarks/triton/attention_sweep.py [--skip-accuracy] [--decode | --with-decode | --train]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import bench, bench_graph, info, log, rel_err, save  # noqa: E402

from rlk_models.ops.triton import attention as attn  # noqa: E402
from rlk_models.ops.triton import attention_sm90  # noqa: E402
from rlk_models.ops.triton.attention import PAGED_CANDIDATES, TRAIN_CANDIDATES, TRAIN_CONFIG  # noqa: E402
from rlk_models.testing.paged_steps import random_block_table  # noqa: E402

HQ, HKV, D = 32, 8, 128
SCALE = D ** -0.5


def accuracy(res):
    lens = [1, 7, 64, 65, 300, 1000]
    t = sum(lens)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(t, h, D, device="cuda", generator=g).bfloat16() for h in (HQ, HKV, HKV))
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device="cuda")
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    do = torch.randn_like(q)
    out = attn.varlen_attention(qg, kg, vg, cu, SCALE)
    grads = torch.autograd.grad(out, [qg, kg, vg], do)
    q64, k64, v64 = (x.double().requires_grad_() for x in (q, k, v))
    outs = []
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        qq = q64[a:b].transpose(0, 1)
        kk = k64[a:b].repeat_interleave(HQ // HKV, 1).transpose(0, 1)
        vv = v64[a:b].repeat_interleave(HQ // HKV, 1).transpose(0, 1)
        outs.append(F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, scale=SCALE).transpose(0, 1))
    o64 = torch.cat(outs)
    g64 = torch.autograd.grad(o64, [q64, k64, v64], do.double())
    r = {"fwd_rel_err_vs_fp64": rel_err(out, o64.detach()),
         "bwd_rel_err_vs_fp64": {n: rel_err(a, b) for n, a, b in zip("qkv", grads, g64)}}
    log("accuracy:", r)
    res["accuracy"] = r


def speed(res):
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
    t_sdpa = bench(lambda: sdpa(qs, ks, vs), warmup=10, rep=50)
    r = {"sdpa_fwd_ms": t_sdpa, "sdpa_fwd_tflops": flops / t_sdpa / 1e9, "fwd": {}}
    for c in TRAIN_CANDIDATES:
        try:
            t = bench(lambda: attn.varlen_attention(q, k, v, cu, SCALE, config=c), warmup=10, rep=50)
        except triton.runtime.errors.OutOfResources:
            continue
        r["fwd"][str(c)] = {"ms": t, "ratio_vs_sdpa": t / t_sdpa}
        log(f"fwd {c}: {t:.3f} ms vs SDPA {t_sdpa:.3f} ms ({t / t_sdpa:.2f}x)")
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    qsg, ksg, vsg = (x.detach().clone().requires_grad_() for x in (qs, ks, vs))
    do = torch.randn_like(q)
    dos = do.view(b, s, HQ, D).transpose(1, 2)
    t_sdpa_fb = bench(lambda: torch.autograd.grad(sdpa(qsg, ksg, vsg), [qsg, ksg, vsg], dos), warmup=5, rep=30)
    t_fb = bench(lambda: torch.autograd.grad(attn.varlen_attention(qg, kg, vg, cu, SCALE), [qg, kg, vg], do),
                    warmup=5, rep=30)
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
            t = bench(lambda: attn.paged_attention(qd, cache, bt, lens_t, qsl, SCALE, config=c), warmup=10, rep=50)
            r["paged_decode"][f"block_size={bs} cfg={c}"] = {"ms": t, "TB_per_s": nbytes / t / 1e9}
            log(f"paged decode bs={bs} {c}: {t:.3f} ms, {nbytes / t / 1e9:.2f} TB/s")
        del cache
    res["bench"] = r


def fa3():
    """vLLM's FA3 varlen entry point, or None where vLLM (CUDA) is not importable."""
    try:
        from vllm.vllm_flash_attn import flash_attn_varlen_func
    except ImportError as e:
        log(f"no FA3 to compare with: {e}")
        return None
    return flash_attn_varlen_func


DECODE_SHAPES = [(256, 288), (256, 544), (256, 2048), (64, 288), (64, 2048), (64, 8192)]


def decode(res, block_size: int = 16):
    """Paged decode (one query token per sequence) at rollout shapes: every paged candidate (bits
    equal to the default's, then time under CUDA graphs) and FA3 on the same contexts."""
    fa = fa3()
    g = torch.Generator(device="cuda").manual_seed(11)
    gen = torch.Generator().manual_seed(12)
    out = {}
    for nseq, ctx in DECODE_SHAPES:
        key = f"b{nseq}_ctx{ctx}"
        bt, nb = random_block_table([ctx] * nseq, block_size, gen, spare=5, device="cuda")
        cache = torch.randn(nb, HKV, block_size, 2 * D, device="cuda", generator=g).bfloat16()
        q = torch.randn(nseq, HQ, D, device="cuda", generator=g).bfloat16()
        lens = torch.full((nseq,), ctx, device="cuda", dtype=torch.int32)
        qsl = torch.arange(nseq + 1, device="cuda", dtype=torch.int32)
        nbytes = nseq * ctx * HKV * 2 * D * 2
        want = attn.paged_attention(q, cache, bt, lens, qsl, SCALE)
        row = {"kv_bytes": nbytes, "ours": {}}
        for c in [attn.PAGED_CONFIG] + [c for c in PAGED_CANDIDATES if c != attn.PAGED_CONFIG]:
            try:
                if not torch.equal(attn.paged_attention(q, cache, bt, lens, qsl, SCALE, config=c), want):
                    log(f"BITS DIFFER decode {key} {c}")
                    row["ours"][str(c)] = "bits differ"
                    continue
                t = bench_graph(lambda: attn.paged_attention(q, cache, bt, lens, qsl, SCALE, config=c))
            except triton.runtime.errors.OutOfResources:
                continue
            row["ours"][str(c)] = {"ms": t, "TB_per_s": nbytes / t / 1e9}
        if fa is not None:
            # vLLM's FA layout: K and V caches [num_blocks, block_size, Hkv, D], the same values
            kc = cache[..., :D].transpose(1, 2).contiguous()
            vc = cache[..., D:].transpose(1, 2).contiguous()
            o = torch.empty_like(q)

            def run_fa():
                fa(q, kc, vc, max_seqlen_q=1, cu_seqlens_q=qsl, max_seqlen_k=ctx, seqused_k=lens, causal=True,
                   softmax_scale=SCALE, block_table=bt, out=o, fa_version=3)

            try:
                run_fa()
                t = bench_graph(run_fa)
                row["fa3"] = {"ms": t, "TB_per_s": nbytes / t / 1e9,
                              "max_abs_diff_vs_ours": (o.float() - want.float()).abs().max().item()}
            except Exception as e:  # our rows still count; the log says why FA3 has none
                log(f"FA3 failed at {key}: {type(e).__name__}: {e}")
                fa = None
            del kc, vc
        best = min((k for k, v in row["ours"].items() if isinstance(v, dict)), key=lambda k: row["ours"][k]["ms"])
        default = row["ours"][str(attn.PAGED_CONFIG)]["ms"]
        row["best"] = best
        fa_ms = row.get("fa3", {}).get("ms")
        log(f"decode {key}: default {default * 1e3:.1f} us, best {best} {row['ours'][best]['ms'] * 1e3:.1f} us "
            f"({row['ours'][best]['TB_per_s']:.2f} TB/s)" + (f"; FA3 {fa_ms * 1e3:.1f} us "
            f"({row['fa3']['TB_per_s']:.2f} TB/s), default/FA3 {default / fa_ms:.2f}x" if fa_ms else ""))
        out[key] = row
        del cache
    res["decode"] = out


# (batch, sequence, Hq, Hkv), D = 128; "8b_2k": the training step benchmark's 8B batch (train_step.py)
TRAIN_SHAPES = {"1.7b": (8, 2048, 16, 8), "8b_2k": (8, 2048, 32, 8), "8b": (8, 4096, 32, 8)}


def train(res, quick: bool = False):
    """The training step's attention (packed causal, bf16) at the 1.7B and 8B shapes: every forward
    candidate and every backward candidate (``BWD_CANDIDATES``: forward + backward, each checked run
    to run and against the default's gradients within bf16 rounding) against SDPA's cuDNN kernels
    (what stock transformers and Liger run on the H200) and its flash kernels (FA2). ``quick``: the
    defaults only (the forward's two kernels, the default backward)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {}
    for name, (b, s, hq, hkv) in TRAIN_SHAPES.items():
        g = torch.Generator(device="cuda").manual_seed(21)
        q, k, v = (torch.randn(b * s, h, D, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv))
        do = torch.randn_like(q)
        cu = torch.arange(0, b * s + 1, s, device="cuda")
        rep = lambda x: x.view(b, s, -1, D).repeat_interleave(hq // x.shape[1], 2).transpose(1, 2)  # noqa: E731
        qs, ks, vs = (rep(x).detach().clone().requires_grad_() for x in (q, k, v))
        dos = do.view(b, s, hq, D).transpose(1, 2)
        flops = 4 * b * hq * s * s * D / 2
        row = {"fwd_tflop": flops / 1e12, "sdpa": {}, "fwd": {}, "fwd_bwd": {}}
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            def f(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=SCALE)
            try:
                row["sdpa"][backend.name] = {"fwd_ms": bench(f, warmup=10, rep=50),
                                             "fwd_bwd_ms": bench(lambda: torch.autograd.grad(f(), [qs, ks, vs], dos),
                                                                 warmup=5, rep=30)}
            except RuntimeError as e:
                log(f"train {name}: SDPA {backend.name} failed: {e}")
        base = row["sdpa"].get("CUDNN_ATTENTION") or row["sdpa"].get("FLASH_ATTENTION")
        for c in [TRAIN_CONFIG] if quick else TRAIN_CANDIDATES:
            # the default's TMA loads, then pointer loads ("... pointer")
            for tma in (True,) if quick else (True, False):
                try:
                    t = bench(lambda: attn.varlen_attention(q, k, v, cu, SCALE, config=c, tma=tma, kernel="triton"),
                              warmup=10, rep=50)
                except triton.runtime.errors.OutOfResources:
                    continue
                row["fwd"][str(c) + ("" if tma else " pointer")] = {"ms": t, "tflops": flops / t / 1e9,
                                                                     "vs_sdpa": t / base["fwd_ms"]}
        # the Gluon forward's forms (the default on sm_90): time, and bits against _varlen_fwd's default
        o_tr, lse_tr = attn._forward(q, k, v, cu, SCALE, None, True, "triton")[:2]
        default_sm90 = attention_sm90.SM90_CONFIG
        for c in attention_sm90.SM90_CANDIDATES:
            attention_sm90.SM90_CONFIG = c
            try:
                o, lse = attn._forward(q, k, v, cu, SCALE, None, True, "sm90")[:2]
                same = torch.equal(o, o_tr) and torch.equal(lse, lse_tr)
                t = bench(lambda: attn.varlen_attention(q, k, v, cu, SCALE, kernel="sm90"), warmup=10, rep=50)
            except (ValueError, RuntimeError, triton.runtime.errors.OutOfResources) as e:
                log(f"train {name}: sm90 {c} failed: {type(e).__name__}: {e}")
                continue
            finally:
                attention_sm90.SM90_CONFIG = default_sm90
            row["fwd"][f"sm90 {c}"] = {"ms": t, "tflops": flops / t / 1e9, "vs_sdpa": t / base["fwd_ms"],
                                       "equal_to_triton": same}
            log(f"train {name}: sm90 {c} forward {t:.3f} ms ({flops / t / 1e9:.0f} TFLOP/s, "
                f"{t / base['fwd_ms']:.2f}x SDPA), bitwise _varlen_fwd (o, lse) {same}")
        del o_tr, lse_tr
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
        want = None
        kept_ds = attn.DS_BYTES
        # every candidate with TMA loads and dS kept (the defaults); the default with pointer loads, and with dQ
        # recomputing dS ("recompute": the path past DS_BYTES, bitwise the same gradients)
        runs = [(bc, True, "") for bc in attn.BWD_CANDIDATES] + [(attn.BWD_CONFIG, False, " pointer"),
                                                                  (attn.BWD_CONFIG, True, " recompute")]
        runs = runs[:1] if quick else runs
        for bc, tma, label in runs:
            def fb(bc=bc, tma=tma):
                o = attn.varlen_attention(qg, kg, vg, cu, SCALE, bwd_config=bc, tma=tma)
                return torch.autograd.grad(o, [qg, kg, vg], do)
            attn.DS_BYTES = 0 if label == " recompute" else kept_ds
            try:
                got = fb()
                again = fb()
            except triton.runtime.errors.OutOfResources:
                continue
            want = want or got
            entry = {"run_to_run": all(torch.equal(a, b) for a, b in zip(got, again)),
                     "rel_diff_vs_first": max(rel_err(a, b) for a, b in zip(got, want)),
                     "equal_to_first": all(torch.equal(a, b) for a, b in zip(got, want))}
            entry["ms"] = bench(fb, warmup=3, rep=20)
            entry["vs_sdpa"] = entry["ms"] / base["fwd_bwd_ms"]
            row["fwd_bwd"][str(bc) + label] = entry
            log(f"train {name} fwd+bwd {bc}{label}: {entry['ms']:.3f} ms "
                f"({entry['vs_sdpa']:.2f}x SDPA), run to run {entry['run_to_run']}, "
                f"rel diff {entry['rel_diff_vs_first']:.1e}, bitwise the first {entry['equal_to_first']}")
        attn.DS_BYTES = kept_ds
        best_f = min(row["fwd"], key=lambda c: row["fwd"][c]["ms"])
        best_b = min(row["fwd_bwd"], key=lambda c: row["fwd_bwd"][c]["ms"])
        log(f"train {name}: SDPA {row['sdpa']}; fwd default {row['fwd'][str(TRAIN_CONFIG)]['ms']:.3f} ms, "
            f"best {best_f} "
            f"{row['fwd'][best_f]['ms']:.3f} ms ({row['fwd'][best_f]['vs_sdpa']:.2f}x); fwd+bwd default "
            f"{row['fwd_bwd'][str(attn.BWD_CONFIG)]['ms']:.3f} ms, best {best_b} {row['fwd_bwd'][best_b]['ms']:.3f} ms "
            f"({row['fwd_bwd'][best_b]['vs_sdpa']:.2f}x)")
        out[name] = row
        del q, k, v, do, qs, ks, vs, qg, kg, vg
    res["train"] = out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--decode", action="store_true", help="only the paged decode at rollout shapes (3.)")
    ap.add_argument("--with-decode", action="store_true", help="1., 2. and 3.")
    ap.add_argument("--train", action="store_true", help="only 4.: the training step's attention at the 1.7B and "
                    "8B shapes, forward and backward candidates, against SDPA's cuDNN and flash kernels")
    ap.add_argument("--quick", action="store_true", help="with --train: the defaults only")
    args = ap.parse_args()
    res = {"info": info()}
    log(res["info"])
    if args.train:
        train(res, quick=args.quick)
        save("attention_train", res)
        return
    if args.decode:
        decode(res)
        save("attention_decode", res)
        return
    if not args.skip_accuracy:
        accuracy(res)
    speed(res)
    if args.with_decode:
        decode(res)
    save("attention_sweep", res)


if __name__ == "__main__":
    main()
