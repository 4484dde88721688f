"""The row-wise kernels (RMSNorm forward and backward with their fused forms, dw's fold, RoPE, SiLU-mul,
the KV-cache write, the log-prob head's trees and its Triton statistics kernel) compiled for the H200
(sm_90) on any machine, no GPU needed: per launch form ``matmul_sass.describe`` -- SASS hash, registers,
spills, and the int64 divisions in its PTX; for the head's trees also ``merge_fma_sides``.

What it is for: these kernels move bytes, so instructions a byte are their speed. An int64 division
by a value known only at run time (``row // H`` on an int64 row) is a subroutine call a thread on
sm_90. One held the fused q/k norm + RoPE at 0.79 TB/s until session 26, where the same kernel
runs at 2.9 TB/s with int32 rows. ``tests/ops/triton/test_sm90_build.py`` fails if any form has one.
Integer arguments carry the divisibility Triton would give them at the Qwen3-8B shapes (16,384
tokens, 32 + 8 heads of 128: H = 40 and H = 32 are not multiples of 16, and a row count need not be).

    python benchmarks/triton/rowwise_sass.py       # JSON; not under TRITON_INTERPRET=1 (it compiles)
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections import Counter
from pathlib import Path

import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matmul_sass import build, describe, fold_run  # noqa: E402

RMS = importlib.import_module("rlk_models.ops.triton.rms_norm")  # the package exports the functions
ROPE = importlib.import_module("rlk_models.ops.triton.rope")
SILU = importlib.import_module("rlk_models.ops.triton.silu_mul")
KV = importlib.import_module("rlk_models.ops.triton.kv_cache")
HEAD = importlib.import_module("rlk_models.ops.triton.logprob_head")
TREE_TYPES = dict(m_ptr="*fp32", s_ptr="*fp32", e_ptr="*fp32", mo_ptr="*fp32", so_ptr="*fp32", eo_ptr="*fp32")


def rms_forward(d: int, *, res=False, rope=False, two=False, heads=1, parts=0):
    """A ``_rms_fwd`` form as ``rms_norm._forward`` launches it (heads = 1 is Triton's constant 1; ``parts``: x is
    that many fp32 split-K partials, folded in the kernel as ``add_rms_norm`` of ``Partials`` launches it)."""
    block, warps = RMS._block(d)
    types = dict(x_ptr="*bf16", w_ptr="*bf16", y_ptr="*bf16", rstd_ptr="*fp32", r_ptr="*bf16", s_ptr="*bf16",
                 pos_ptr="*i64", tab_ptr="*fp32", w2_ptr="*bf16", y2_ptr="*bf16", rstd2_ptr="*fp32",
                 M="i32", D="i32", SX="i32", eps="fp32", HALF="i32", H1="i32")
    consts = dict(ROWS=RMS._fwd_rows(d), BLOCK_D=block, RES=res, ROPE=rope,
                  BLOCK_HALF=triton.next_power_of_2(max(1, d // 2)), TWO=two)
    if parts:  # the partials' fold (matmul.fold_parts, in the runs mm hands on) and the bias
        types |= dict(x_ptr="*fp32", b_ptr="*bf16")
        consts |= dict(PARTS=parts, RUN=fold_run(parts), HAS_BIAS=True)
    if heads == 1:
        consts["H"] = 1
    else:
        types["H"] = "i32"
    return build(RMS._rms_fwd, types, consts, ("D", "SX", "HALF", "H1"), warps)


def rms_backward(d: int, *, ds=False, heads=1, stages=None, dx_x=False):
    """A ``_rms_bwd`` form as ``rms_norm._backward`` launches it (``stages``: ``_bwd_stages`` when None)."""
    rows, chunk, warps = RMS._bwd_tile(d)
    types = dict(dy_ptr="*bf16", x_ptr="*bf16", w_ptr="*bf16", rstd_ptr="*fp32", dx_ptr="*bf16", dwp_ptr="*fp32",
                 ds_ptr="*bf16", M="i32", D="i32", sx="i32", sdx="i32")
    consts = dict(CHUNK=chunk, ROWS=rows, BLOCK_D=triton.next_power_of_2(d), DW=True, DS=ds,
                  STAGES=RMS._bwd_stages(d) if stages is None else stages, DX_X=dx_x, NATIVE=True)
    if heads == 1:
        consts["heads"] = 1
    else:
        types["heads"] = "i32"
    return build(RMS._rms_bwd, types, consts, ("D", "sx", "sdx"), warps)


def forms() -> dict:
    """Every row-wise launch form of the Qwen3/Llama decoder and its backward, at the 8B shapes."""
    return {
        "rms_norm forward, hidden 4096": rms_forward(4096),
        "add_rms_norm forward, hidden 4096": rms_forward(4096, res=True),
        # the engine's fold of a split launch's partials inside the norm (session 47: a fold that built under the
        # interpreter failed to compile on the GPU, which only a build catches on the CPU)
        "add_rms_norm forward of 2 partials, hidden 4096": rms_forward(4096, res=True, parts=2),
        "add_rms_norm forward of 8 partials, hidden 4096": rms_forward(4096, res=True, parts=8),
        "rms_norm forward, per head 128": rms_forward(128, heads=32),
        "rms_norm_rope forward, per head 128": rms_forward(128, rope=True, heads=32),
        "qk_norm_rope forward, 32 + 8 heads of 128": rms_forward(128, rope=True, two=True, heads=40),
        "add_rms_norm backward, hidden 4096": rms_backward(4096, ds=True),
        "rms_norm backward, per head 128": rms_backward(128, heads=32),
        "q/k norm backward into the qkv gradient, per head 128": rms_backward(128, heads=32, dx_x=True),
        "dw fold": build(RMS._fold_chunks, dict(dwp_ptr="*fp32", dw_ptr="*bf16", n_chunks="i32", D="i32"),
                            dict(BLOCK_C=RMS.FOLD_COLS, AHEAD=RMS.FOLD_AHEAD), ("D",), 1),
        "rope, 32 heads of 128": build(
            ROPE._rope_kernel, dict(x_ptr="*bf16", pos_ptr="*i64", tab_ptr="*fp32", y_ptr="*bf16", H="i32", HALF="i32",
                                    sx="i32", sy="i32"),
            dict(SIGN=1.0, BLOCK_H=32, BLOCK_HALF=64), ("H", "HALF", "sx", "sy"), 4),
        "silu_mul forward": build(SILU._silu_mul_fwd, dict(gu_ptr="*bf16", y_ptr="*bf16", inter="i32"),
                                     dict(BLOCK=SILU.BLOCK), ("inter",), 4),
        "silu_mul backward": build(
            SILU._silu_mul_bwd, dict(gu_ptr="*bf16", dy_ptr="*bf16", dgu_ptr="*bf16", act_ptr="*bf16", inter="i32"),
            dict(WITH_ACT=True, BLOCK=SILU.BLOCK), ("inter",), 4),
        "write_kv, heads of 128": build(
            KV._write_kv_kernel, dict(k_ptr="*bf16", v_ptr="*bf16", cache_ptr="*bf16", slot_ptr="*i64", s_kt="i32",
                                      s_kh="i32", s_vt="i32", s_vh="i32", s_blk="i32", s_head="i32", s_off="i32",
                                      block_size="i32"),
            dict(D=128, BLOCK_D=128), ("s_kt", "s_kh", "s_vt", "s_vh", "s_blk", "s_head", "s_off", "block_size"), 4),
    }


def tree_forms() -> dict:
    """The head's tree kernels (``_tree_kernel`` a level count and FINAL; ``_shard_tree_kernel`` groups x tiles a
    group as the 8B head's shards give them: 594 tiles in 8 groups of 75 at TP=1, 4 of 75 at TP=2, ..., as TP=1's
    forward runs it and as a rank's shard with entropy)."""
    out = {f"head tree, {1 << lv} stats, final={final}": build(
        HEAD._tree_kernel, {**TREE_TYPES, "N": "i32"}, dict(NP2=1 << lv, LEVELS=lv, FINAL=final), (), 4)
        for lv in (1, 3, 7, 8) for final in (False, True)}
    shard = {**TREE_TYPES, "tl_ptr": "*fp32", "tgt_ptr": "*i64", "to_ptr": "*fp32", "G": "i32", "TPG": "i32",
             "n_real": "i32", "start": "i32", "V": "i32"}
    for g, lv in ((3, 7), (2, 7), (1, 7), (3, 6), (1, 2), (0, 3), (3, 0)):
        for with_e, final in ((False, True), (True, False)):  # TP=1's forward; a TP rank's shard with entropy
            out[f"head shard tree, {1 << g} groups of {1 << lv}, entropy={with_e}, final={final}"] = build(
                HEAD._shard_tree_kernel, shard, dict(GP2=1 << g, LEVELS_G=g, NP2=1 << lv, LEVELS=lv, WITH_E=with_e,
                                                     HAS_TGT=True, FINAL=final), (), 4)
    return out


STATS_MODES = {"plain": {}, "logits kept": dict(KEEP=True), "entropy": dict(WITH_E=True),
               "probabilities kept": dict(KEEP_P=True)}


def stats_forms() -> dict:
    """The head's Triton statistics kernel (``_head_stats_kernel``) with pointer loads, as ``_launch_stats``
    launches it for bf16 (each ``STATS_CONFIG`` tile height, its ``STATS_STAGES`` K slots cut to fit shared
    memory): plain (the training forward at decode sizes), keeping the logits (the vLLM class's sampling head),
    with the entropy, keeping the probabilities (the training forward with a gradient)."""
    types = dict(h="*bf16", w="*bf16", tgt_ptr="*i64", m_ptr="*fp32", s_ptr="*fp32", e_ptr="*fp32", t_ptr="*fp32",
                 l_ptr="*fp32", q="*bf16", T="i32", V="i32", K="i32", n_tiles="i32", n_stats="i32", start="i32")
    out = {}
    for bm, warps in HEAD.STATS_CONFIG.values():
        stages = HEAD.fit_stages(bm + HEAD.VOCAB_TILE, 2, HEAD.STATS_STAGES.get(bm, 3))
        for mode, flags in STATS_MODES.items():
            consts = dict(HAS_TGT=True, WITH_E=False, KEEP=False, KEEP_P=False, HW_TMA=False, Q_TMA=False, BLOCK_M=bm,
                          BLOCK_V=HEAD.VOCAB_TILE, BLOCK_K=HEAD.BLOCK_K, NUM_PROGS=4 * 132) | flags
            out[f"stats kernel (Triton), {bm}-row tiles, {mode}"] = build(HEAD._head_stats_kernel, types, consts,
                                                                           ("K",), warps, stages)
    return out


def merge_fma_sides(ptx: str) -> dict:
    """Which product each merge FMA of a tree kernel fuses: "first" when it is ``a * fa`` (a the pair's first
    operand of ``tl.maximum(ma, mb)``, ``fa = exp(ma - max)`` behind a select), "second" for ``b * fb``, "other"
    for an FMA not of that shape. ``_pair`` writes ``fma(sa, fa, sb * fb)``, so every one is "first"; an
    ``sa * fa + sb * fb`` left to the compiler fuses either product, by the code around it (session 36: the fused
    shard tree against two ``_tree`` launches), and the same sums round differently. The pair's order is read from
    ``max.f32``'s operands, which the compiler may commute, so this can miss a compiler-chosen form: main's trees
    before ``_pair`` counted none "second" at 128 stats, yet rounded ~9% of the 8B head's shard sums otherwise.
    It did catch the fused shard tree before ``_pair`` (5 of 40). The GPU tests remain the proof."""
    defs = {}
    for line in ptx.splitlines():
        m = re.match(r"\s*(?:@%p\d+\s+)?([\w.]+)\s+(%r\d+),\s*(.*);", line)
        if m:
            defs[m.group(2)] = (m.group(1), [a.strip() for a in m.group(3).split(",")])

    def side(r: str) -> str | None:  # r = selp(0, ex2(mul(sub(x, max(a, b)), log2 e))): x is a or b
        chain = [("selp.f32", 1), ("ex2", 0), ("mul.f32", 0), ("sub.f32", None)]
        for op, arg in chain:
            d = defs.get(r)
            if d is None or not d[0].startswith(op):
                return None
            if arg is not None:
                r = d[1][arg]
        x, mx = defs[r][1]
        mx_op, (a, b) = defs.get(mx, ("", [None, None]))
        return None if mx_op != "max.f32" else "first" if x == a else "second" if x == b else None

    return dict(Counter(side(f[1][0]) or side(f[1][1]) or "other" for f in defs.values() if f[0] == "fma.rn.f32"))


def main() -> None:
    built = forms() | tree_forms() | stats_forms()
    print(json.dumps({name: {**describe(kernel), **({"merge_fma_sides": merge_fma_sides(kernel.asm["ptx"])}
                                                      if name.startswith("head") else {})}
                      for name, kernel in built.items()}, indent=1))


if __name__ == "__main__":
    main()
