"""The attention kernels compiled for the H200 (sm_90) on any machine, no GPU needed: per launch
config its MMA instructions, registers, spill stack, shared memory and the programs an SM that
those allow (``matmul_sass.describe``).

What it is for: the bits of a row do not depend on the tile's shape or on which side of the dot
the rows sit as long as every ``tl.dot`` is a wgmma (Hopper's warpgroup MMA); an mma.sync
(BLOCK_M 16/32, or a dot Triton cannot map to wgmma) gives other bits (tests/gpu shows both).
And the speed of the paged decode is set by how many programs share an SM and how deep the K/V
prefetch is (session 15: two programs an SM need at most 113 KB of shared memory each). Speed
still needs the GPU (attention_sweep.py); this is the check between device sessions.

    python benchmarks/triton/attention_sass.py       # JSON; not under TRITON_INTERPRET=1 (it compiles)
    python benchmarks/triton/attention_sass.py --backward   # the backward candidates too
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matmul_sass import build, build_gluon, describe  # noqa: E402

from rlk_models.ops.triton import attention_sm90  # noqa: E402
from rlk_models.ops.triton.attention import (  # noqa: E402
    BLOCK_N,
    BWD_CANDIDATES,
    DQ_RECOMPUTE_CONFIG,
    PAGED_CANDIDATES,
    PAGED_CONFIG,
    SWAP_N,
    TRAIN_CANDIDATES,
    TRAIN_CONFIG,
    _bwd_dkdv,
    _bwd_dq,
    _bwd_dq_ds,
    _paged_fwd,
    _varlen_fwd,
)
from rlk_models.ops.triton.attention_sm90 import SM90_CANDIDATES, SM90_CONFIG  # noqa: E402

SM_SHARED, CTA_RESERVED, SM_REGS, SM_THREADS = 228 * 1024, 1024, 65536, 2048  # sm_90 per SM
# strides: multiples of 16
_I32 = ("sq", "so", "s_blk", "s_head", "s_off", "s_bt", "block_size", "sk", "sv", "sdv", "s_ds")


def _compile(fn, types: dict, consts: dict, warps: int, stages: int):
    return build(fn, types, consts, _I32, warps, stages)


def paged(config: tuple[int, int, int, int], group: int = 4, d: int = 128):
    block_m, warps, stages, swap_stages = config
    types = dict(q_ptr="*bf16", kv_ptr="*bf16", o_ptr="*bf16", bt_ptr="*i32", seq_lens_ptr="*i32", qsl_ptr="*i32",
                 qk_scale="fp32", sq="i32", so="i32", s_blk="i32", s_head="i32", s_off="i32", s_bt="i32",
                 block_size="i32", n_req="i32")
    consts = dict(GROUP=group, D=d, BLOCK_M=block_m, BLOCK_N=BLOCK_N, R_PAD=256, SWAP_N=SWAP_N,
                  SWAP_STAGES=swap_stages)
    return _compile(_paged_fwd, types, consts, warps, stages)


def training(config: tuple[int, int, int], group: int = 4, d: int = 128, tma: bool = True):
    block_m, warps, stages = config
    types = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", o_ptr="*bf16", lse_ptr="*fp32", cu_ptr="*i32",
                 qk_scale="fp32", T="i32", sq="i32", sk="i32", sv="i32", so="i32")
    if tma:
        types.update(q_ptr=f"tensordesc<bf16[{block_m}, {d}]>", k_ptr=f"tensordesc<bf16[{BLOCK_N}, {d}]>",
                     v_ptr=f"tensordesc<bf16[{BLOCK_N}, {d}]>")
    return _compile(_varlen_fwd, types, dict(GROUP=group, D=d, BLOCK_M=block_m, BLOCK_N=BLOCK_N, TMA=tma), warps,
                    stages)


def training_sm90(config: tuple = SM90_CONFIG, group: int = 4, d: int = 128):
    """``attention_sm90._varlen_fwd_ws`` (Gluon) for sm_90, its descriptors' types from host descriptors over
    CPU tensors of the Qwen3-8B heads."""
    import torch

    block_m, num_buf, pingpong, consumer_regs, maxnreg = config
    q, kv = torch.empty(256, 32, d, dtype=torch.bfloat16), torch.empty(256, 32 // group, d, dtype=torch.bfloat16)
    descs = attention_sm90.descriptors(q, kv, kv, block_m // 2, BLOCK_N)
    types = dict(o_ptr="*bf16", lse_ptr="*fp32", cu_ptr="*i32", qk_scale="fp32", T="i32", so="i32")
    consts = dict(GROUP=group, D=d, BLOCK_M=block_m, BLOCK_N=BLOCK_N, NUM_BUF=num_buf, PINGPONG=pingpong,
                  CONSUMER_REGS=consumer_regs, num_warps=4)
    return build_gluon(attention_sm90._varlen_fwd_ws, dict(zip(("q_desc", "k_desc", "v_desc"), descs)), types,
                       consts, {"so"}, maxnreg)


def backward(config: tuple[tuple[int, int, int, int], tuple[int, int, int, int]], group: int = 4, d: int = 128,
             tma: bool = True) -> dict:
    """The backward kernels of a ``BWD_CANDIDATES`` entry: dK/dV storing dS and dQ from it (the default
    path), and dK/dV alone and dQ recomputing dS (past ``DS_BYTES``, at ``DQ_RECOMPUTE_CONFIG``)."""
    (bm, bn, warps, stages), (bm2, bn2, warps2, stages2) = config
    bm3, bn3, warps3, stages3 = DQ_RECOMPUTE_CONFIG
    pad = max(bm, bn, bm2, bn2)
    common = dict(lse_ptr="*fp32", delta_ptr="*fp32", cu_ptr="*i32", qk_scale="fp32", sm_scale="fp32", T="i32",
                  sq="i32", sk="i32", sv="i32")
    rows = lambda r, w=d: f"tensordesc<bf16[{r}, {w}]>" if tma else "*bf16"  # noqa: E731
    dkdv = dict(common, q_ptr=rows(bm), k_ptr="*bf16", v_ptr="*bf16", do_ptr=rows(bm), dk_ptr="*bf16", dv_ptr="*bf16",
                sdv="i32", s_ds="i32", ds_rows="i32")
    dq = dict(common, q_ptr=rows(bm3), k_ptr=rows(bn3), v_ptr=rows(bn3), do_ptr=rows(bm3), dq_ptr="*bf16")
    dq_ds = dict(ds_ptr=rows(bm2, bn2), k_ptr=rows(bn2), dq_ptr="*bf16", cu_ptr="*i32", sm_scale="fp32", sq="i32",
                 sk="i32", s_ds="i32", ds_rows="i32")
    kv = dict(GROUP=group, D=d, BLOCK_M=bm, BLOCK_N=bn, TMA=tma, PAD=pad)
    return {"dkdv_ds": report(_compile(_bwd_dkdv, dict(dkdv, ds_ptr=rows(bm, bn)), dict(kv, WRITE_DS=True), warps,
                                       stages), warps),
            "dq_ds": report(_compile(_bwd_dq_ds, dq_ds, dict(GROUP=group, D=d, BLOCK_M=bm2, BLOCK_N=bn2, TMA=tma,
                                                             PAD=pad), warps2, stages2), warps2),
            "dkdv": report(_compile(_bwd_dkdv, dict(dkdv, ds_ptr="*bf16"), dict(kv, WRITE_DS=False), warps, stages),
                           warps),
            "dq": report(_compile(_bwd_dq, dq, dict(GROUP=group, D=d, BLOCK_M=bm3, BLOCK_N=bn3, TMA=tma), warps3,
                                  stages3), warps3)}


def mma(kernel) -> dict:
    """The MMA instructions in the kernel's PTX: wgmma shapes, and how many mma.sync."""
    ptx = kernel.asm["ptx"]
    return {"wgmma": sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx))),
            "mma_sync": len(re.findall(r"\bmma\.sync\b", ptx))}


def report(kernel, warps: int) -> dict:
    r = {**describe(kernel), **mma(kernel)}
    r["programs_per_sm"] = min(SM_SHARED // (r["shared_bytes"] + CTA_RESERVED),
                               SM_REGS // (r["registers"] * 32 * warps), SM_THREADS // (32 * warps))
    return r


def main() -> None:
    """JSON: every training candidate (the forward; ``--backward``: the backward's too; TMA loads,
    the GPU's default, and pointer loads) and paged candidate at the Qwen3-8B heads (GROUP 4), and the paged default at
    GROUP 1 and 16 (MHA, and the largest group whose decode rows sit on the N side)."""
    res = {"training": {str(c): report(training(c), c[1]) for c in TRAIN_CANDIDATES},
           "training_pointer_loads": {str(c): report(training(c, tma=False), c[1]) for c in TRAIN_CANDIDATES},
           # 12 warps: the two consumer warpgroups and the loader's (one warp, a warpgroup's registers); every
           # candidate at D 128, the default at 64 too
           "training_sm90": {f"{c} D={d}": report(training_sm90(c, d=d), 12) for c in SM90_CANDIDATES
                             for d in ((64, 128) if c == SM90_CONFIG else (128,))},
           "paged": {str(c): report(paged(c), c[1]) for c in PAGED_CANDIDATES},
           "paged_default_by_group": {str(g): report(paged(PAGED_CONFIG, group=g), PAGED_CONFIG[1]) for g in (1, 16)},
           "defaults": {"training": str(TRAIN_CONFIG), "paged": str(PAGED_CONFIG)}}
    if "--backward" in sys.argv[1:]:
        res["backward"] = {str(c): backward(c) for c in BWD_CANDIDATES}
        res["backward_pointer_loads"] = {str(c): backward(c, tma=False) for c in BWD_CANDIDATES}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
